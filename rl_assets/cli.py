"""``rl-assets``: train, inspect and serve experiments of one home.

The CLI is a thin client. ``train`` records the experiment, brings the home's
services up, and supervises a driver process (restarting it if it dies),
while it follows progress from durable state; killing the CLI stops nothing
that matters, and running it again continues.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from rl_assets.domain.experiment import EXPERIMENT_NAME_PATTERN, ExperimentConfig
from rl_assets.domain.rubrics import UnknownRubricError
from rl_assets.domain.runtime import ExecutionSettings, FaultConfig, Runtime
from rl_assets.home import Home, HomeError

MAX_DRIVER_ATTEMPTS = 3
DB_OUTAGE_TIMEOUT_S = 180.0
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input: reported on one line, before any work."""


def _pydantic_message(err: ValidationError) -> str:
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "value"
    message = first["msg"].removeprefix("Value error, ")
    flag = field.removesuffix("_s").replace("_", "-")  # ExecutionSettings' *_s fields are the --*-latency/timeout flags
    return f"--{flag}: {message} (got {first.get('input')!r})"


def _config_from_args(args: argparse.Namespace) -> tuple[ExperimentConfig, Runtime]:
    try:
        config = ExperimentConfig(
            name=args.experiment,
            steps=args.steps,
            worlds=args.worlds,
            prompts=args.prompts,
            samples=args.samples,
            lr=args.lr,
            max_turns=args.max_turns,
            rubric=args.rubric,
            generate_retries=args.generate_retries,
            judge_retries=args.judge_retries,
            failed_trial_policy=args.failed_trial_policy,
        )
        runtime = Runtime(
            faults=FaultConfig(
                flaky_trial_rate=args.flaky_trial_rate,
                judge_flake_rate=args.judge_flake_rate,
                hang_trial_rate=args.hang_trial_rate,
                crash_driver_at_step=args.crash_driver_at_step,
            ),
            execution=ExecutionSettings(
                tool_latency_s=args.tool_latency,
                judge_latency_s=args.judge_latency,
                trial_timeout_s=args.trial_timeout,
                judge_timeout_s=args.judge_timeout,
                max_concurrent_trials=args.max_concurrent_trials,
            ),
        )
    except ValidationError as err:
        if err.errors()[0]["loc"] == ("name",):
            raise UsageError(f"--experiment: must match [a-z0-9][a-z0-9_-]* (got {args.experiment!r})") from None
        raise UsageError(_pydantic_message(err)) from None
    if runtime.faults.crash_driver_at_step is not None and runtime.faults.crash_driver_at_step >= config.steps:
        raise UsageError(f"--crash-driver-at-step: must be below --steps ({config.steps})")
    return config, runtime


def _resolve_rubric(home: Home, name: str, stores=None) -> str:
    """The rubric's name once it is known to be usable (and, with stores, pinned to its hash)."""
    from rl_assets.stores.rubrics import RubricError, RubricRegistry

    registry = stores.rubrics if stores is not None else RubricRegistry(home.rubrics)
    try:
        return registry.get(name).name
    except (UnknownRubricError, RubricError) as err:
        raise UsageError(f"--rubric: {err}") from None


def _open(home: Home, with_ray: bool = True):
    from rl_assets.resources.stores import Stores
    from rl_assets.services.local_deployment import LocalDeployment
    from rl_assets.stores.database import Database

    deployment = LocalDeployment(home)
    try:
        deployment.check()
    except HomeError as err:
        raise UsageError(str(err)) from None
    print(f"rl-assets: home {home.root} (starting its Postgres and Ray head if needed)", file=sys.stderr)
    deployment.up(with_ray=with_ray)
    return Stores(home.root, Database.from_env())


class Progress:
    """One status line on stderr, rewritten in place on a terminal."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = ""

    def show(self, text: str) -> None:
        if text == self.last:
            return
        self.last = text
        sys.stderr.write(("\r\033[K" + text) if self.tty else text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty and self.last:
            sys.stderr.write("\n")


def _describe(p) -> str:
    if p.worlds_missing:
        return f"{p.config.name}: building worlds ({len(p.worlds_missing)} left)"
    if not p.steps:
        return f"{p.config.name}: starting"
    if p.done:
        return f"{p.config.name}: {p.config.steps}/{p.config.steps} steps trained (rubric {p.config.rubric})"
    s = next(s for s in p.steps if not s.complete)
    phase = "training" if s.train_running else ("repairing" if s.trained else "rolling out")
    return (
        f"{p.config.name} ({p.config.rubric}): step {s.step} ({s.step + 1} of {p.config.steps}) {phase}: "
        f"{s.count('ok')} ok, {s.count('failed')} failed, "
        f"{s.count('running')} running, {s.count('pending')} pending of {len(s.trials)} trials"
    )


def _supervise(home: Home, stores, config: ExperimentConfig, rubric: str | None = None) -> None:
    """Drive ``config`` (re-scored under ``rubric`` if given) to done, restarting a dead driver.

    The supervisor only reads durable state, so a database outage (a restarting
    Postgres) is waited out, not fatal: the driver waits for it too.
    """
    from dagster import DagsterInstance

    from rl_assets.driver.audit import audit
    from rl_assets.driver.loop import EXIT_BUSY, EXIT_GAVE_UP
    from rl_assets.driver.planner import plan
    from rl_assets.stores.database import TRANSIENT_DB_ERRORS
    from rl_assets.worlds import LocalWorlds

    progress = Progress()

    def current(instance):
        deadline = time.monotonic() + DB_OUTAGE_TIMEOUT_S
        while True:
            try:
                return plan(instance, stores, config, rubric)
            except TRANSIENT_DB_ERRORS:
                if time.monotonic() > deadline:
                    raise
                progress.show(f"{config.name}: the database is unavailable; waiting for it")
                time.sleep(1.0)

    with DagsterInstance.get() as instance:
        for damage in audit(instance, stores, LocalWorlds(home.worlds, home.forks), config):
            print(f"rl-assets: {damage.kind} {damage.partition_key}: {damage.detail}; regenerating it", file=sys.stderr)
        attempts = 0
        while not current(instance).done:
            attempts += 1
            if attempts > MAX_DRIVER_ATTEMPTS:
                raise RuntimeError(f"the driver died {MAX_DRIVER_ATTEMPTS} times; see {home.logs}")
            with open(home.logs / "driver.log", "ab") as log:
                driver = subprocess.Popen(
                    [sys.executable, "-m", "rl_assets.driver.loop", config.name, *([rubric] if rubric else [])],
                    stdout=log,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                )
            while driver.poll() is None:
                progress.show(_describe(current(instance)))
                time.sleep(0.5)
            err = driver.stderr.read().decode() if driver.stderr else ""
            if driver.returncode == EXIT_BUSY:
                progress.close()
                # The refusal is the driver's last line (earlier ones are import-time warnings).
                refusal = err.strip().splitlines()[-1:] or [f"experiment {config.name!r} is being trained elsewhere"]
                raise UsageError(refusal[0])
            if driver.returncode == EXIT_GAVE_UP:
                progress.close()
                raise RuntimeError(err.strip())
            if driver.returncode != 0:
                progress.show(f"{config.name}: driver exited with {driver.returncode}; restarting it")
        progress.show(_describe(current(instance)))
    progress.close()


def cmd_train(args: argparse.Namespace) -> int:
    config, runtime = _config_from_args(args)
    home = Home.resolve(args.home)
    from rl_assets.results import experiment_result, format_table
    from rl_assets.stores.experiments import ExperimentConflictError

    _resolve_rubric(home, config.rubric)
    stores = _open(home)
    _resolve_rubric(home, config.rubric, stores)
    try:
        stores.experiments.create_or_resume(config, runtime)
    except ExperimentConflictError as err:
        raise UsageError(str(err)) from None
    _supervise(home, stores, config)
    _print_result(experiment_result(stores, config), args.json, format_table)
    return 0


def _existing(stores, name: str, flag: str = "--experiment") -> ExperimentConfig:
    from rl_assets.stores.experiments import UnknownExperimentError

    try:
        return stores.experiments.get(name)
    except UnknownExperimentError as err:
        raise UsageError(f"{flag}: {err}") from None


def cmd_rescore(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from rl_assets.driver.planner import plan
    from rl_assets.results import experiment_result, format_table

    home = Home.resolve(args.home)
    _resolve_rubric(home, args.rubric)
    stores = _open(home)
    rubric = _resolve_rubric(home, args.rubric, stores)
    config = _existing(stores, args.experiment)
    with DagsterInstance.get() as instance:
        if not plan(instance, stores, config).done:
            raise UsageError(f"experiment {config.name!r} is not trained yet; finish it with `rl-assets train` first")
    if rubric != config.rubric:
        stores.scorings.request(config.name, rubric, requested_by="cli")
        _supervise(home, stores, config, rubric)
    _print_result(experiment_result(stores, config.scored_with(rubric)), args.json, format_table)
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    from rl_assets.results import experiment_result, format_table
    from rl_assets.stores.experiments import ExperimentConflictError

    if not re.fullmatch(EXPERIMENT_NAME_PATTERN, args.experiment):
        raise UsageError(f"--experiment: must match [a-z0-9][a-z0-9_-]* (got {args.experiment!r})")
    home = Home.resolve(args.home)
    _resolve_rubric(home, args.rubric)
    stores = _open(home)
    parent = _existing(stores, args.parent, "--from")
    rubric = _resolve_rubric(home, args.rubric, stores)
    fork = parent.model_copy(update={"name": args.experiment, "rubric": rubric})
    try:
        stores.experiments.create_or_resume(fork, Runtime(), forked_from=parent.name)
    except ExperimentConflictError as err:
        raise UsageError(str(err)) from None
    _supervise(home, stores, fork)
    _print_result(experiment_result(stores, fork), args.json, format_table)
    return 0


def cmd_rubrics(args: argparse.Namespace) -> int:
    from rl_assets.stores.rubrics import RubricError

    stores = _open(Home.resolve(args.home), with_ray=False)
    if args.add:
        try:
            rubric = stores.rubrics.add(Path(args.add))
        except RubricError as err:
            raise UsageError(f"--add: {err}") from None
        print(f"registered rubric {rubric.name} ({rubric.content_hash})", file=sys.stderr)
    for name, r in stores.rubrics.all().items():
        print(
            f"{name:<20} {r.content_hash}  correctness {r.correctness_weight:g}, "
            f"efficiency {r.efficiency_weight:g}, tidiness {r.tidiness_weight:g}"
        )
    for problem in stores.rubrics.problems():
        print(f"unusable: {problem}", file=sys.stderr)
    return 0


def _print_result(result: dict[str, Any], as_json: bool, fmt) -> None:
    print(json.dumps(result, sort_keys=False) if as_json else fmt(result))


def cmd_status(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from rl_assets.driver.planner import plan
    from rl_assets.results import experiment_result, format_table
    from rl_assets.stores.experiments import UnknownExperimentError

    home = Home.resolve(args.home)
    stores = _open(home, with_ray=False)
    try:
        config = stores.experiments.get(args.experiment)
    except UnknownExperimentError as err:
        raise UsageError(str(err)) from None
    with DagsterInstance.get() as instance:
        p = plan(instance, stores, config)
    result = experiment_result(stores, config)
    result["status"] = "done" if p.done else "in progress"
    result["progress"] = _describe(p)
    if args.json:
        print(json.dumps(result))
    else:
        print(_describe(p))
        print(format_table(result))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rl_assets.report import evidence, format_report
    from rl_assets.stores.experiments import UnknownExperimentError

    stores = _open(Home.resolve(args.home), with_ray=False)
    try:
        config = stores.experiments.get(args.experiment)
    except UnknownExperimentError as err:
        raise UsageError(str(err)) from None
    report = evidence(stores, config)
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from rl_assets.services.dev_server import DevServer

    home = Home.resolve(args.home)
    _open(home)
    return DevServer(home).run(args.host, args.port)


def cmd_stop(args: argparse.Namespace) -> int:
    from rl_assets.services.local_deployment import LocalDeployment

    home = Home.resolve(args.home)
    stopped = LocalDeployment(home).down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


class _Parser(argparse.ArgumentParser):
    """Argument errors on one line, like every other usage error (``--help`` still shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"rl-assets: error: {message} (see {self.prog} --help)\n")


def _field_help(field: FieldInfo) -> str:
    """A model field's description as argparse help (which treats ``%`` as a format character)."""
    return (field.description or "").replace("%", "%%")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rl-assets", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_home(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--home", help="home directory (default: $RL_ASSETS_HOME or ./.rl-assets)")
        return p

    train = with_home(sub.add_parser("train", help="run or resume an experiment to completion"))
    d = ExperimentConfig.model_fields
    train.add_argument("--experiment", required=True, help="experiment name")
    for name in ("steps", "worlds", "prompts", "samples", "max_turns", "generate_retries", "judge_retries"):
        train.add_argument(f"--{name.replace('_', '-')}", type=int, default=d[name].default, help=_field_help(d[name]))
    train.add_argument("--lr", type=float, default=d["lr"].default, help=_field_help(d["lr"]))
    train.add_argument("--rubric", default=d["rubric"].default, help=_field_help(d["rubric"]))
    train.add_argument(
        "--failed-trial-policy",
        choices=["skip", "mask-group"],
        default="skip",
        help=_field_help(d["failed_trial_policy"]),
    )
    f = FaultConfig.model_fields
    for name in ("flaky_trial_rate", "judge_flake_rate", "hang_trial_rate"):
        train.add_argument(f"--{name.replace('_', '-')}", type=float, default=0.0, help=_field_help(f[name]))
    train.add_argument("--crash-driver-at-step", type=int, default=None, help=_field_help(f["crash_driver_at_step"]))
    x = ExecutionSettings.model_fields
    train.add_argument(
        "--tool-latency", type=float, default=x["tool_latency_s"].default, help=_field_help(x["tool_latency_s"])
    )
    train.add_argument(
        "--judge-latency", type=float, default=x["judge_latency_s"].default, help=_field_help(x["judge_latency_s"])
    )
    train.add_argument(
        "--trial-timeout", type=float, default=x["trial_timeout_s"].default, help=_field_help(x["trial_timeout_s"])
    )
    train.add_argument(
        "--judge-timeout", type=float, default=x["judge_timeout_s"].default, help=_field_help(x["judge_timeout_s"])
    )
    train.add_argument(
        "--max-concurrent-trials",
        type=int,
        default=x["max_concurrent_trials"].default,
        help=_field_help(x["max_concurrent_trials"]),
    )
    train.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    train.set_defaults(func=cmd_train)

    rescore = with_home(
        sub.add_parser("rescore", help="judge a trained experiment's trajectories under another rubric and retrain")
    )
    rescore.add_argument("--experiment", required=True, help="a trained experiment")
    rescore.add_argument("--rubric", required=True, help="rubric to re-score with (see `rl-assets rubrics`)")
    rescore.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    rescore.set_defaults(func=cmd_rescore)

    fork = with_home(
        sub.add_parser("fork", help="a new experiment under another rubric, reusing every unchanged rollout")
    )
    fork.add_argument("--from", dest="parent", required=True, help="the experiment to fork")
    fork.add_argument("--experiment", required=True, help="name of the new experiment")
    fork.add_argument("--rubric", required=True, help="rubric of the new experiment")
    fork.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    fork.set_defaults(func=cmd_fork)

    rubrics = with_home(sub.add_parser("rubrics", help="list the rubric registry, or add a rubric file to it"))
    rubrics.add_argument("--add", metavar="FILE", help="a <name>.json rubric to validate and register")
    rubrics.set_defaults(func=cmd_rubrics)

    status = with_home(sub.add_parser("status", help="show an experiment's progress and table"))
    status.add_argument("--experiment", required=True)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    report = with_home(sub.add_parser("report", help="the evidence table: retries, judge calls, actor pids"))
    report.add_argument("--experiment", required=True)
    report.add_argument("--json", action="store_true")
    report.set_defaults(func=cmd_report)

    dev = with_home(sub.add_parser("dev", help="open the Dagster UI (and daemon) on this home"))
    dev.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    dev.add_argument("--port", type=int, default=3000)
    dev.set_defaults(func=cmd_dev)

    stop = with_home(sub.add_parser("stop", help="stop the home's background services"))
    stop.set_defaults(func=cmd_stop)
    return parser


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", message=".*is currently in beta.*")  # Dagster's, not the user's concern
    args = build_parser().parse_args(argv)
    try:
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


if __name__ == "__main__":
    sys.exit(main())
