"""``rl-assets``: train, inspect and serve experiments of one home.

The CLI is a thin client. ``train`` records the experiment and the request to
train it, brings the home's services up (Postgres, the Ray head, the Dagster
daemon whose sensor drives every experiment), and follows progress from
durable state, starting the daemon again if it dies; killing the CLI stops
nothing that matters, and running it again continues.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import sys
import time
import types
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from rl_assets.application import experiments
from rl_assets.application.experiments import Refused
from rl_assets.domain.experiment import ExperimentConfig, is_derived
from rl_assets.domain.names import check_experiment_name, check_rubric_name, shown
from rl_assets.domain.rubrics import describe
from rl_assets.domain.runtime import ExecutionSettings, FaultConfig, Runtime
from rl_assets.domain.validation import in_words
from rl_assets.domain.waiting import Waiting
from rl_assets.home.layout import Home, HomeError
from rl_assets.workloads.registry import UnknownWorkloadError, workload_of

MAX_DRIVER_ATTEMPTS = 3
"""Daemon starts a following command makes before it gives up."""
T = TypeVar("T")
FOLLOW_POLL_S = 0.5
RUNS_ENDING = Waiting(timeout_s=60.0, interval_s=FOLLOW_POLL_S)
"""How long a finished command waits for its experiment's runs to record their end (it takes a second or two)."""
DB_OUTAGE = Waiting(timeout_s=180.0, interval_s=1.0)
"""How long a following command waits out a database restart, and how often it looks again."""
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input: reported on one line, before any work."""


@dataclass(frozen=True)
class Flag:
    """A command-line flag and the model field it sets: its type, default, bounds and help are the field's."""

    flag: str
    model: type[BaseModel]
    field: str


FLAG_RENAMES: dict[tuple[type[BaseModel], str], str] = {(ExperimentConfig, "name"): "--experiment"}
"""The one flag not named after its field; every other is ``--field-name`` less a ``_s`` (seconds) suffix."""


def _flag_name(model: type[BaseModel], field: str) -> str:
    return FLAG_RENAMES.get((model, field)) or "--" + field.removesuffix("_s").replace("_", "-")


TRAIN_FLAGS: tuple[Flag, ...] = tuple(
    Flag(_flag_name(model, field), model, field)
    for model in (ExperimentConfig, FaultConfig, ExecutionSettings)
    for field, info in model.model_fields.items()
    if not is_derived(info)
)
"""Every field of the schema's models as a flag, generated: a new field is a new flag with its bounds and help."""
FLAG_OF: dict[tuple[type[BaseModel], str], str] = {(f.model, f.field): f.flag for f in TRAIN_FLAGS}
FLAGS: dict[str, Flag] = {f.flag: f for f in TRAIN_FLAGS}


def _validated(model: type[BaseModel], args: argparse.Namespace) -> Any:
    """``model`` built from the flags that set its fields; a bad value is a :class:`UsageError` naming its flag."""
    values = {f.field: getattr(args, f.field) for f in TRAIN_FLAGS if f.model is model}
    try:
        return model(**values)
    except ValidationError as err:
        raise UsageError(_problem(model, err)) from None


def _problem(model: type[BaseModel], err: ValidationError) -> str:
    first = err.errors()[0]
    message = in_words(first)
    if not first["loc"]:  # a rule across fields; its message names them
        return message
    flag = FLAG_OF[(model, str(first["loc"][0]))]
    return f"{flag}: {message} (got {shown(first.get('input'))})"


def _checked(check: Callable[[str], str], value: str, flag: str) -> str:
    """A name checked by its one check (the application's) before it names a row or a file."""
    with _as_usage():
        return experiments.checked_name(check, flag, value)


REFUSED_FLAGS = {"parent": "--from", "name": "--experiment", "experiment": "--experiment"}
"""The flags of the inputs a fork or re-scoring names; every other refused field is a config field's flag."""


@contextmanager
def _as_usage() -> Iterator[None]:
    """The application's refusal as this command's: one line naming the flag at fault, exit 2."""
    try:
        yield
    except Refused as err:
        if err.field is None:
            raise UsageError(err.problem) from None
        field = err.field
        flag = REFUSED_FLAGS.get(field) or FLAG_OF.get((ExperimentConfig, field)) or field
        raise UsageError(f"{flag}: {err.problem}") from None


def _config_from_args(args: argparse.Namespace) -> tuple[ExperimentConfig, Runtime]:
    config = _validated(ExperimentConfig, args)
    runtime = Runtime(faults=_validated(FaultConfig, args), execution=_validated(ExecutionSettings, args))
    if runtime.faults.crash_driver_at_step is not None and runtime.faults.crash_driver_at_step >= config.steps:
        raise UsageError(f"--crash-driver-at-step: must be below --steps ({config.steps})")
    try:
        workload_of(config)
    except UnknownWorkloadError as err:
        raise UsageError(f"--workload: {err}") from None
    return config, runtime


def _check_environment() -> None:
    """The environment variables every process of this command will read, validated before any work."""
    from rl_assets.home.settings import BadEnvironmentError, settings

    try:
        settings()
    except BadEnvironmentError as err:
        raise UsageError(str(err)) from None


def _usable_rubric(home: Home, name: str, config: ExperimentConfig | None = None) -> None:
    """Refuse an unusable rubric from the home's files alone, before any service starts (or Dagster loads)."""
    from rl_assets.stores.rubrics import RubricRegistry

    with _as_usage():
        experiments.usable_rubric(RubricRegistry(home.rubrics), name, config)


def _preflight(checks) -> None:
    """What the command needs of the machine, before it records anything: refused on the first failure's line."""
    from rl_assets.cli.preflight import PreflightError, require

    try:
        done = require(checks)
    except PreflightError as err:
        raise UsageError(str(err)) from None
    for check in done:
        if check.status == "warn":
            print(f"rl-assets: warning: {check.line()}", file=sys.stderr)


def _open(home: Home, with_ray: bool = True):
    from rl_assets.home.services.local_deployment import LocalDeployment
    from rl_assets.stores.database import Database
    from rl_assets.stores.home_stores import Stores

    deployment = LocalDeployment(home)
    try:
        deployment.check()
    except HomeError as err:
        raise UsageError(str(err)) from None
    print(f"rl-assets: home {home.root} (starting its Postgres and Ray head if needed)", file=sys.stderr)
    deployment.up(with_ray=with_ray)
    return Stores(home.root, Database.from_env())


def _follow(
    home: Home, stores, config: ExperimentConfig, rubric: str | None = None, *, audit_all: bool = False
) -> None:
    """Follow ``config`` (re-scored under ``rubric`` if given) to done while the home's daemon drives it.

    First the audit: the records the work ahead rests on (``audit_all``: every record of the experiment).

    The command launches nothing: it records what is wanted, and the daemon's
    driver sensor launches every run. It holds the experiment's driver lock
    while it follows (one command per experiment: a second is refused on one
    line), starts the daemon again if it died, reads only durable state (so a
    database outage is waited out), and stops with the reason when the driver
    gives up on a unit that nothing can go on without.
    """
    from dagster import DagsterInstance

    from rl_assets.cli.progress_display import ProgressDisplay
    from rl_assets.cli.replanning import Replanning
    from rl_assets.driver.audit import audit
    from rl_assets.driver.failure_watch import Failure, FailureWatch, last_failure
    from rl_assets.driver.planner import Plan, last_change, plan, stuck_units
    from rl_assets.home.services.daemon import LocalDaemon
    from rl_assets.instance.pooled_storage import OUTAGE_ERRORS
    from rl_assets.stores.locks import SessionLock, driver_lock
    from rl_assets.worlds.local import LocalWorlds

    # What is loaded by now (Dagster, the definitions the preflight built) stays for the command's life: frozen,
    # the collections its plans' garbage sets off no longer walk it (about 0.7 s of CPU in a 40 s step of 256 trials).
    gc.collect()  # the garbage first: frozen, it would never be freed
    gc.freeze()
    with stores.db.transaction() as cur:
        lock = SessionLock(stores.db.info, driver_lock(cur, config.name))
    if not lock.acquire(wait_s=0):
        raise UsageError(f"another driver is already running experiment {config.name!r}")
    progress = ProgressDisplay()
    rubric_name = rubric or config.rubric

    def durable(read: Callable[[], T]) -> T:
        """``read()`` with the driver lock still this command's, a database outage waited out."""
        deadline = DB_OUTAGE.deadline()
        while True:
            try:
                if not lock.hold():
                    raise UsageError(f"another driver took over experiment {config.name!r}")
                return read()
            except OUTAGE_ERRORS:
                if deadline.expired():
                    raise
                progress.note(f"{config.name}: the database is unavailable; waiting for it")
                deadline.sleep()

    def planned(instance) -> Plan:
        observed_at = time.time()
        p = plan(instance, stores, config, rubric)
        if p.done:  # the line `status` shows from now on, whether or not the driver looks again
            stores.progress.note(config.name, p.config.rubric, p.describe(), True, observed_at)
        return p

    def stop(reason: str, log: Path) -> NoReturn:
        """End the command on a failure that will repeat; ``status`` shows the reason until the driver moves on."""
        stores.progress.note(config.name, rubric_name, f"{config.name}: stopped: {reason}", False, time.time())
        raise RuntimeError(f"{reason}; see {log}")

    def watched(watch: FailureWatch) -> Failure | None:
        """The failure watch's finding; none while the database is restarting (``current`` waits that out, and
        the watch looks again on the next turn), so an outage never ends the command by surprise."""
        try:
            return watch.check()
        except OUTAGE_ERRORS:
            return None

    daemon = LocalDaemon(home)
    try:
        with DagsterInstance.get() as instance:
            worlds = LocalWorlds(home.worlds, home.forks, home.tasks)
            for damage in audit(instance, stores, worlds, config, everything=audit_all):
                what = f"{damage.kind} {damage.partition_key}: {damage.detail}"
                print(f"rl-assets: {what}; regenerating it", file=sys.stderr)
            watch = FailureWatch(instance, config.name, since=time.time())
            stores.drives.request(config.name, requested_by="cli")
            deaths: list[str] = []
            replanning = Replanning()
            while True:
                change = durable(lambda: last_change(instance, stores))
                if replanning.due(change, time.monotonic()):  # always the first time round
                    p = durable(lambda: planned(instance))
                    if p.done:
                        break
                if failure := watched(watch):
                    log = home.logs / (f"run-{failure.run_id}.log" if failure.run_id else "daemon.log")
                    stop(failure.line(), log)
                if stuck := stuck_units(p):
                    unit = stuck[0]
                    last = last_failure(instance, config.name, unit.job, unit.partition_key)
                    cause = f": {last.error} (run {last.run_id})" if last is not None else ""
                    log = home.logs / (f"run-{last.run_id}.log" if last is not None else "")
                    stop(f"{unit.job} {unit.partition_key} failed {unit.failures} times; giving up{cause}", log)
                if daemon.process() is None:
                    if deaths or daemon.session() is not None:  # it was started, and died
                        deaths.append(daemon.last_error() or "")
                    repeated = len(deaths) >= 2 and deaths[-1] and deaths[-1] == deaths[-2]
                    if repeated or len(deaths) >= MAX_DRIVER_ATTEMPTS:
                        reason = f"the daemon died {len(deaths)} times: {deaths[-1] or 'no error in its log'}"
                        stop(reason, daemon.log)
                    progress.note(f"{config.name}: the daemon is not running; starting it")
                    daemon.ensure_running()
                progress.plan(p)
                time.sleep(FOLLOW_POLL_S)
            _await_runs_ending(instance, config.name, progress)
            progress.plan(p)  # the last line says it is done, after any wait
    finally:
        progress.close()
        lock.release()


def _await_runs_ending(instance, experiment: str, progress) -> None:
    """Wait (at most :data:`RUNS_ENDING`) for the experiment's runs to record their end.

    The plan is done once the last unit's records are durable, a moment before its run records that it
    ended; what a user does next (``compact``, which refuses runs in flight; the UI's run list; a script
    reading run statuses) must find every run ended. Runs that do not end in time are counted on stderr, not waited for.
    """
    from rl_assets.cli.compaction import runs_in_flight
    from rl_assets.instance.pooled_storage import OUTAGE_ERRORS

    deadline = RUNS_ENDING.deadline()
    try:
        while left := runs_in_flight(instance, experiment):
            if deadline.expired():
                print(
                    f"rl-assets: {left} run(s) of {experiment!r} have not ended yet; the UI's Runs page shows them",
                    file=sys.stderr,
                )
                return
            progress.note(f"{experiment}: waiting for {left} run(s) to record their end")
            deadline.sleep()
    except OUTAGE_ERRORS:  # the work is done and durable; the statuses are there once the database is back
        print("rl-assets: the database is unavailable; runs may show as running until it is back", file=sys.stderr)


def cmd_train(args: argparse.Namespace) -> int:
    config, runtime = _config_from_args(args)
    home = Home.resolve(args.home)
    _usable_rubric(home, config.rubric, config)
    _refuse_caller_keys(config)
    with _as_usage():
        experiments.check_named_keys(home, config)  # before any service starts; start() checks again, pinned
    from rl_assets.cli.preflight import for_home
    from rl_assets.views.results import experiment_result, failed_steps, format_table

    _preflight(for_home(home, tasks=config.tasks is not None))
    stores = _open(home)
    with _as_usage():
        config = experiments.start(stores, home, config, runtime).config
    _follow(home, stores, config, audit_all=args.audit)
    _print_result(experiment_result(stores, config, per_trial=True), args.json, format_table)
    if not args.json:
        _next_steps(args, config)
    return _all_failed(failed_steps(stores, config))


def _next_steps(args: argparse.Namespace, config: ExperimentConfig) -> None:
    """Where to look next, on stderr (stdout is the table): the evidence, its first trial, and the UI."""
    home = f" --home {shlex.quote(args.home)}" if args.home else ""
    print(
        f"next: `rl-assets report --experiment {config.name}{home}` (retries, judge calls, every trial), "
        f"`rl-assets show {config.trials(0)[0].trial_id} --experiment {config.name}{home}` (a trial's transcript), "
        f"`rl-assets dev{home}` (the UI: asset graph, partition grid, transcripts)",
        file=sys.stderr,
    )


def _all_failed(steps: dict[int, Counter[str]]) -> int:
    """1, saying why on stderr, if some step trained on no trial at all (every one failed for good); else 0."""
    for step, reasons in sorted(steps.items()):
        counted = "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common())
        print(f"step {step}: every trial failed for good ({counted or 'no trial ran'})", file=sys.stderr)
    return 1 if steps else 0


CALLER_KEYS = (
    ("RL_ASSETS_POLICY_API_KEY", "policy", "policy_key_name"),
    ("RL_ASSETS_JUDGE_API_KEY", "judge", "judge_key_name"),
)
"""The variables that once carried the keys; the key's role; the config field that names a stored key instead."""


def _refuse_caller_keys(config: ExperimentConfig) -> None:
    """Refuse, before anything starts, a key left in this shell's environment: the runs never see it (the home's
    services drop every credential they inherit). The keys an experiment names are the application's check."""
    from rl_assets.home.settings import settings

    if settings().env != "local":
        return  # keys are Kubernetes Secrets there
    for variable, role, field in CALLER_KEYS:
        if getattr(config, field) is None and os.environ.get(variable):
            raise UsageError(
                f"{variable} is set, but runs never read the caller's environment: store the key with "
                f"`rl-assets keys set {role} --from-env {variable}` and give {FLAG_OF[(ExperimentConfig, field)]} "
                f"{role}"
            )


def _existing(stores, name: str, flag: str = "--experiment") -> ExperimentConfig:
    with _as_usage():
        return experiments.existing(stores, name, "parent" if flag == "--from" else "experiment")


def cmd_rescore(args: argparse.Namespace) -> int:
    _checked(check_experiment_name, args.experiment, "--experiment")
    _checked(check_rubric_name, args.rubric, "--rubric")
    home = Home.resolve(args.home)
    _usable_rubric(home, args.rubric)
    from dagster import DagsterInstance

    from rl_assets.cli.preflight import for_home
    from rl_assets.driver.planner import plan
    from rl_assets.views.results import experiment_result, format_table

    _preflight(for_home(home, sandbox=False))  # a re-scoring judges and trains: it runs no trial
    stores = _open(home)
    with DagsterInstance.get() as instance, _as_usage():
        trained = lambda config: plan(instance, stores, config).done  # noqa: E731 - read with the instance open
        rescoring = experiments.rescore(stores, args.experiment, args.rubric, trained, requested_by="cli")
    config = rescoring.config
    if rescoring.rubric != config.rubric:
        _follow(home, stores, config, rescoring.rubric)
    _print_result(
        experiment_result(stores, config.scored_with(rescoring.rubric), per_trial=True), args.json, format_table
    )
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    _checked(check_experiment_name, args.experiment, "--experiment")
    home = Home.resolve(args.home)
    from dagster import DagsterInstance

    from rl_assets.cli.compaction import NotFinishedError, compact
    from rl_assets.driver.planner import plan
    from rl_assets.stores.event_compaction import EventCompaction

    stores = _open(home, with_ray=False)
    config = _existing(stores, args.experiment)
    with DagsterInstance.get() as instance:
        if not plan(instance, stores, config).done:
            raise UsageError(f"experiment {config.name!r} is not finished; finish it with `rl-assets train` first")
        try:
            done = compact(instance, EventCompaction(stores.db), home, config.name)
        except NotFinishedError as err:
            raise UsageError(str(err)) from None
    result = {"experiment": config.name, "runs": done.runs, "events_deleted": done.events, "log_bytes": done.log_bytes}
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"compacted {config.name}: {done.runs} finished runs, {done.events} step events deleted, "
            f"{done.log_bytes / 1e6:.1f} MB of run logs deleted"
        )
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    _checked(check_experiment_name, args.parent, "--from")
    _checked(check_experiment_name, args.experiment, "--experiment")
    _checked(check_rubric_name, args.rubric, "--rubric")
    home = Home.resolve(args.home)
    _usable_rubric(home, args.rubric)
    from rl_assets.cli.preflight import for_home
    from rl_assets.views.results import experiment_result, format_table

    _preflight(for_home(home))
    stores = _open(home)
    _refuse_caller_keys(_existing(stores, args.parent, "--from"))
    with _as_usage():
        fork = experiments.fork(stores, home, args.parent, args.experiment, args.rubric).config
    _follow(home, stores, fork)
    _print_result(experiment_result(stores, fork, per_trial=True), args.json, format_table)
    return 0


def cmd_rubrics(args: argparse.Namespace) -> int:
    from rl_assets.stores.rubrics import RubricError, RubricRegistry

    home = Home.resolve(args.home)
    if args.add:
        try:  # the file alone is checked before any service starts; adding it checks it against the pins
            RubricRegistry(home.rubrics).check(Path(args.add))
        except RubricError as err:
            raise UsageError(f"--add: {err}") from None
    stores = _open(home, with_ray=False)
    if args.add:
        try:
            rubric = stores.rubrics.add(Path(args.add))
        except RubricError as err:
            raise UsageError(f"--add: {err}") from None
        print(f"registered rubric {rubric.name} ({rubric.content_hash})", file=sys.stderr)
    for name, r in stores.rubrics.all().items():
        print(f"{name:<20} {r.content_hash}  {describe(r)}")
    for problem in stores.rubrics.problems():
        print(f"unusable: {problem}", file=sys.stderr)
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    """The home's API keys: stored from stdin or a variable, listed by name, removed; never printed."""
    from rl_assets.home.services.api_keys import ApiKeyError, ApiKeys, check_key_name

    home = Home.resolve(args.home)
    keys = ApiKeys(home)
    try:
        if args.keys_command != "list":
            check_key_name(args.name)
        if args.keys_command == "set":
            value = _key_value(args)
            home.ensure()
            keys.store(args.name, value)
            print(f"stored API key {args.name} in {keys.root} (0600); running experiments read it at their next call")
        elif args.keys_command == "rm":
            if not keys.remove(args.name):
                raise UsageError(f"no API key named {args.name!r} in this home")
            print(f"removed API key {args.name}")
        else:
            names = keys.names()
            for name in names:
                print(name)
            if not names:
                print(f"no API keys in {keys.root}: store one with `rl-assets keys set NAME`", file=sys.stderr)
    except ApiKeyError as err:
        raise UsageError(str(err)) from None
    return 0


def _key_value(args: argparse.Namespace) -> str:
    """The key to store: from the variable ``--from-env`` names, else stdin (prompted without echo on a terminal)."""
    if args.from_env is not None:
        value = os.environ.get(args.from_env)
        if not value:
            raise UsageError(f"--from-env: {args.from_env} is not set")
        return value
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass(f"API key {args.name}: ")
    return sys.stdin.readline()


def _print_result(result: dict[str, Any], as_json: bool, fmt) -> None:
    print(json.dumps(result, sort_keys=False) if as_json else fmt(result))


def _progress(stores, config: ExperimentConfig) -> tuple[str, bool, str | None]:
    """(the experiment's progress line, whether it is done, when that was observed): the driver's note, read
    without loading Dagster; for an experiment no driver of this home has planned yet, the plan itself."""
    note = stores.progress.get(config.name, config.rubric)
    if note is not None:
        return note.line, note.done, note.observed_at.isoformat(timespec="seconds")
    from dagster import DagsterInstance

    from rl_assets.driver.planner import plan

    with DagsterInstance.get() as instance:
        p = plan(instance, stores, config)
    return p.describe(), p.done, None


def cmd_status(args: argparse.Namespace) -> int:
    from rl_assets.views.results import experiment_result, format_table

    _checked(check_experiment_name, args.experiment, "--experiment")
    home = Home.resolve(args.home)
    stores = _open(home, with_ray=False)
    config = _existing(stores, args.experiment)
    line, done, observed_at = _progress(stores, config)
    result = experiment_result(stores, config)
    result["status"] = "done" if done else "in progress"
    result["progress"] = line
    result["observed_at"] = observed_at
    if args.json:
        print(json.dumps(result))
    else:
        print(line if done or observed_at is None else f"{line} (the driver's view at {observed_at})")
        print(format_table(result))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rl_assets.views.report import evidence, format_report

    _checked(check_experiment_name, args.experiment, "--experiment")
    if args.html is not None:
        from rl_assets.views.plots import MissingPlottingError, require_matplotlib

        try:
            require_matplotlib()
        except MissingPlottingError as err:
            raise UsageError(f"--html: {err}") from None
    stores = _open(Home.resolve(args.home), with_ray=False)
    config = _existing(stores, args.experiment)
    report = evidence(stores, config, audit=args.audit)
    print(json.dumps(report) if args.json else format_report(report))
    if args.html is not None:
        from rl_assets.views.report_html import curves, render

        Path(args.html).write_text(render(report, curves(stores, config)), encoding="utf-8")
        print(f"wrote {args.html}", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from rl_assets.views.results import UnknownTrialError, trial_view

    _checked(check_experiment_name, args.experiment, "--experiment")
    stores = _open(Home.resolve(args.home), with_ray=False)
    config = _existing(stores, args.experiment)
    try:
        print(trial_view(stores, config, args.trial))
    except UnknownTrialError as err:
        raise UsageError(str(err)) from None
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    _checked(check_experiment_name, args.experiment, "--experiment")
    if args.rubric is not None:
        _checked(check_rubric_name, args.rubric, "--rubric")
    if args.tokenizer is not None and not args.tokenizer.is_dir():
        raise UsageError(f"--tokenizer: no directory {args.tokenizer}")
    if args.out is not None and not Path(args.out).resolve().parent.is_dir():
        raise UsageError(f"--out: no directory {Path(args.out).resolve().parent}")
    from rl_assets.views.skyrl_export import ExportError, export_skyrl

    stores = _open(Home.resolve(args.home), with_ray=False)
    config = _existing(stores, args.experiment)
    try:
        output = export_skyrl(stores, config, args.step, args.rubric, args.tokenizer)
    except ExportError as err:
        raise UsageError(str(err)) from None
    text = json.dumps(output, separators=(",", ":"))
    if args.out is None:
        print(text)
    else:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    what = f"{len(output['response_ids'])} model calls of {sum(output['is_last_step'])} trajectories"
    print(f"rl-assets: exported {what}{'' if args.out is None else f' to {args.out}'}", file=sys.stderr)
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from rl_assets.cli.preflight import check_port, for_home
    from rl_assets.home.services.daemon import LocalDaemon
    from rl_assets.home.services.dev_server import DevServer

    home = Home.resolve(args.home)
    _preflight([*for_home(home), lambda: check_port(args.host, args.port)])
    _open(home)
    LocalDaemon(home).ensure_running()
    try:
        return DevServer(home).run(args.host, args.port)
    except HomeError as err:  # already running, or a UI token file that is not the owner's alone
        raise UsageError(str(err)) from None


def cmd_doctor(args: argparse.Namespace) -> int:
    from rl_assets.cli.preflight import check_port, for_home, run_checks, table

    home = Home.resolve(args.home)
    checks = run_checks([*for_home(home, tasks=True), lambda: check_port("127.0.0.1", args.port)])
    for line in table(checks):
        print(line)
    return 1 if any(c.status == "fail" for c in checks) else 0


def cmd_stop(args: argparse.Namespace) -> int:
    from rl_assets.containers.runtime import container_runtime, containers_available
    from rl_assets.containers.sessions import reap
    from rl_assets.home.services.local_deployment import LocalDeployment

    home = Home.resolve(args.home)
    stopped = LocalDeployment(home).down()
    if containers_available():  # the run workers are gone: so is every reason to keep their task containers
        removed = reap(container_runtime())
        stopped += [f"{len(removed)} task container(s)"] if removed else []
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def cmd_tasks_check(args: argparse.Namespace) -> int:
    from rl_assets.cli.preflight import check_sandbox, check_seccomp
    from rl_assets.containers.oracle import run_container_oracle
    from rl_assets.containers.runtime import containers_available
    from rl_assets.sandbox.task_trial import run_oracle
    from rl_assets.tasks.check import check_tasks

    root = Path(args.dir)
    if not root.is_dir():
        raise UsageError(f"DIR: not a directory: {args.dir}")
    _preflight([lambda: check_sandbox(tasks=True), check_seccomp])
    containers = containers_available()

    def oracle(task):
        return run_container_oracle(task) if task.in_container else run_oracle(task)

    result = check_tasks(root, oracle=oracle, containers=containers)
    if not result.checked:
        raise UsageError(f"DIR: no task directories in {args.dir}")
    for line in result.table():
        print(line)
    for refusal in result.refusals:
        for line in refusal.lines():
            print(line)
    for problem in [*result.problems, *result.failures]:
        print(problem, file=sys.stderr)
    print(result.summary())
    return 0 if result.ok else 1


class _Parser(argparse.ArgumentParser):
    """Argument errors on one line, like every other usage error (``--help`` still shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"rl-assets: error: {message} (see {self.prog} --help)\n")


def _field_help(field: FieldInfo) -> str:
    """A model field's description as argparse help (which treats ``%`` as a format character)."""
    return (field.description or "").replace("%", "%%")


def _argument_type(annotation: Any) -> dict[str, Any]:
    """argparse's ``type`` (and ``choices``) for a field's annotation: int, float, str, ``X | None``, a Literal."""
    if get_origin(annotation) in (Union, types.UnionType):
        (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Annotated:  # a checked name: argparse reads the str, the model checks it
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal:
        return {"type": str, "choices": list(get_args(annotation))}
    if annotation not in (int, float, str):
        raise TypeError(f"no command-line form for a field of type {annotation!r}")
    return {"type": annotation}


def _add_flag(parser: argparse.ArgumentParser, flag: Flag, name: str | None = None, **overrides: Any) -> None:
    """``flag`` (or ``name``, a flag for the same field) as an argument typed, defaulted and helped by its field."""
    field = flag.model.model_fields[flag.field]
    kwargs: dict[str, Any] = {"dest": flag.field, "help": _field_help(field), **_argument_type(field.annotation)}
    if "choices" not in kwargs:  # argparse shows the choices themselves
        kwargs["metavar"] = (name or flag.flag).removeprefix("--").upper().replace("-", "_")
    if field.is_required():
        kwargs["required"] = True
    else:
        kwargs["default"] = field.default
    parser.add_argument(name or flag.flag, **{**kwargs, **overrides})


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rl-assets", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_home(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--home", help="home directory (default: $RL_ASSETS_HOME or ./.rl-assets)")
        return p

    train = with_home(sub.add_parser("train", help="run or resume an experiment to completion"))
    for flag in TRAIN_FLAGS:
        _add_flag(train, flag)
    train.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    train.add_argument(
        "--audit",
        action="store_true",
        help="first re-read every record of the experiment and regenerate what is damaged "
        "(default: only the records the work ahead rests on)",
    )
    train.set_defaults(func=cmd_train)

    rescore = with_home(
        sub.add_parser("rescore", help="judge a trained experiment's trajectories under another rubric and retrain")
    )
    _add_flag(rescore, FLAGS["--experiment"], dest="experiment", help="a trained experiment")
    _add_flag(rescore, FLAGS["--rubric"], required=True, help="rubric to re-score with (see `rl-assets rubrics`)")
    rescore.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    rescore.set_defaults(func=cmd_rescore)

    fork = with_home(
        sub.add_parser("fork", help="a new experiment under another rubric, reusing every unchanged rollout")
    )
    _add_flag(fork, FLAGS["--experiment"], "--from", dest="parent", help="the experiment to fork")
    _add_flag(fork, FLAGS["--experiment"], dest="experiment", help="name of the new experiment")
    _add_flag(fork, FLAGS["--rubric"], required=True, help="rubric of the new experiment")
    fork.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    fork.set_defaults(func=cmd_fork)

    compact_ = with_home(
        sub.add_parser(
            "compact",
            help="delete a finished experiment's step events and run logs; keep its records and materializations",
        )
    )
    _add_flag(compact_, FLAGS["--experiment"], dest="experiment", help="a finished experiment")
    compact_.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    compact_.set_defaults(func=cmd_compact)

    rubrics = with_home(sub.add_parser("rubrics", help="list the rubric registry, or add a rubric file to it"))
    rubrics.add_argument("--add", metavar="FILE", help="a <name>.json rubric to validate and register")
    rubrics.set_defaults(func=cmd_rubrics)

    keys = with_home(
        sub.add_parser(
            "keys",
            help="the home's API keys, which experiments name (--policy-key-name, --judge-key-name)",
            description="API keys live in the home, one 0600 file each under secrets/, and are read by the runs "
            "each time they call a model: replacing a key needs no restart, and no key passes through an "
            "environment. Values are never printed.",
        )
    )
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    keys_set = with_home(keys_sub.add_parser("set", help="store (or replace) a key, read from stdin"))
    keys_set.add_argument("name", metavar="NAME", help="the key's name, as experiments give it")
    keys_set.add_argument("--from-env", metavar="VAR", help="read the key from this variable instead of stdin")
    keys_rm = with_home(keys_sub.add_parser("rm", help="forget a key"))
    keys_rm.add_argument("name", metavar="NAME")
    with_home(keys_sub.add_parser("list", help="the stored keys' names"))
    keys.set_defaults(func=cmd_keys)

    status = with_home(sub.add_parser("status", help="show an experiment's progress and table"))
    _add_flag(status, FLAGS["--experiment"], dest="experiment")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    report = with_home(sub.add_parser("report", help="the evidence table: retries, judge calls, actor pids"))
    _add_flag(report, FLAGS["--experiment"], dest="experiment")
    report.add_argument("--json", action="store_true")
    report.add_argument(
        "--audit",
        action="store_true",
        help="also re-read every record and check the six invariants on every unit (reads the whole history)",
    )
    report.add_argument("--html", metavar="FILE", help="also write a page with learning curves, checks and evidence")
    report.set_defaults(func=cmd_report)

    show = with_home(sub.add_parser("show", help="one trial: its reward or why it failed, and its transcript"))
    _add_flag(show, FLAGS["--experiment"], dest="experiment")
    show.add_argument("trial", metavar="TRIAL", help="the trial's id, e.g. s0-create-file-n0 or s2-p1-n0")
    show.set_defaults(func=cmd_show)

    export = with_home(
        sub.add_parser("export", help="write an experiment's trajectories as another trainer's input (SkyRL)")
    )
    _add_flag(export, FLAGS["--experiment"], dest="experiment", help="a trained task experiment")
    export.add_argument("--step", type=int, metavar="S", help="one trained step (default: every trained step)")
    export.add_argument(
        "--format", required=True, choices=["skyrl"], help="skyrl: SkyRL's step-wise GeneratorOutput, as JSON"
    )
    _add_flag(export, FLAGS["--rubric"], default=None, help="rewards of this rubric (default: the experiment's)")
    export.add_argument(
        "--tokenizer",
        type=Path,
        metavar="DIR",
        help="re-tokenize calls without recorded token ids with this checkpoint directory's tokenizer and chat "
        "template (an experiment of --trainer none; one of --trainer grpo uses its own model's)",
    )
    export.add_argument("--out", metavar="FILE", help="write the JSON to FILE (default: stdout)")
    export.set_defaults(func=cmd_export)

    dev = with_home(
        sub.add_parser(
            "dev",
            help="open the Dagster UI (and daemon) on this home, for its owner: log in at the URL it prints",
            description="Serve the home's Dagster UI. Every request needs the home's UI token (the file "
            "services/ui.token, 0600, made once): open the login URL printed on stderr.",
        )
    )
    dev.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    dev.add_argument("--port", type=int, default=3000)
    dev.set_defaults(func=cmd_dev)

    doctor = with_home(
        sub.add_parser(
            "doctor", help="check what the commands need of this machine (sandbox, home, disk, ports, code location)"
        )
    )
    doctor.add_argument("--port", type=int, default=3000, help="the port `dev` would serve on (default: 3000)")
    doctor.set_defaults(func=cmd_doctor)

    stop = with_home(sub.add_parser("stop", help="stop the home's background services"))
    stop.set_defaults(func=cmd_stop)

    tasks = sub.add_parser("tasks", help="Harbor-format task directories (a task set is a directory of them)")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True)
    check = tasks_sub.add_parser(
        "check",
        help="validate every task directory under DIR, run each solution as the oracle, print a table",
        description="Validate every task directory under DIR (or DIR itself, if it is one task) against Harbor's "
        "task format and task.toml schema, then run each locally runnable task's solution/solve.sh as the agent "
        "in the task sandbox, followed by its verifier (tests/test.sh), on a fresh fork of its environment. "
        "Prints a table with each reward and the seconds it took, and says which settings do not apply locally. "
        "Exits 1 if a task is invalid, naming each problem's file and key, or if a solution does not reach "
        "reward 1 or its verifier fails. Tasks without a solution are validated only.",
    )
    check.add_argument("dir", metavar="DIR", help="a task set (a directory of task directories) or one task")
    check.set_defaults(func=cmd_tasks_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Dagster's beta and preview notices are not the user's concern (and must not look like an error).
    warnings.filterwarnings("ignore", message=".*is currently in (beta|preview).*")
    args = build_parser().parse_args(argv)
    try:
        if args.command not in ("stop", "tasks", "doctor", "keys"):  # these work whatever the environment says
            _check_environment()
        return args.func(args)
    except UsageError as err:
        print(f"rl-assets: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as err:
        print(f"rl-assets: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nrl-assets: interrupted; running units continue, run the same command to follow them", file=sys.stderr)
        return 130
