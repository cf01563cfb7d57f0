"""A long chaos soak: many random small experiments, each with injected faults and one SIGKILL at a random point.

``python benchmarks/soak.py [--runs 20] [--seed S] [--first I] [--kinds tree,trial,judge,actor,head]
[--home DIR] [--keep-home] [--run-timeout 900] [--no-rerun-check] [--fail-fast] [--json]``

Each soak run ``i`` draws, from ``Random(f"{seed}:{i}")`` (so ``--seed S --first i --runs 1`` replays run ``i``):

- a kill kind from ``KILL_KINDS`` and a kill point ``random_kill_point(...)`` (durable events of a clean run);
- a small experiment with a unique name: steps 1-3 (2-3 for an ``actor`` kill, which needs a step after the
  first trained one), worlds 1-2, prompts 1-2, samples 1-3, max turns 3 or 6, lr 1 or 2, default retries;
- runtime flags: each of ``--flaky-trial-rate``, ``--judge-flake-rate``, ``--hang-trial-rate`` on or off (with a
  short ``--trial-timeout`` when hangs are on), sometimes ``--crash-driver-at-step``, and tool/judge latencies
  long enough for the kill's target to exist (a rollout with its sandbox up, a judge call in flight).

It starts ``rl-assets train`` (``Train.start``), kills it with ``kills.kill`` (a ``NotReached`` because the train
ended first is a *missed* kill), then finishes as ``tests/test_kills.py`` does: a plain rerun of the same command
after a tree kill, else the same CLI to its end; after a ``head`` kill the home's head is ensured up again.

Expectations. Injected faults fail (or hang) only attempt 0 of a Dagster run (``context.retry_number``), so with
the default retries (2) every fault is survived, also when a kill makes a unit run again in a new run: no trial may
fail for good, and the result must be the oracle's clean one, ``oracle_expectation(config)``. What the faults
do change is the attempt counts, so the evidence is checked per unit rather than by totals:

- **lost units**: trials without a completed rollout, a recorded verdict or a materialized reward, or failed for
  good; steps without a training-ledger row;
- **double applications**: ``Evidence.double_applications`` (a completed rollout, a recorded verdict or a trained
  step executed again);
- **extra judge calls**: calls beyond one per trial, with ``Evidence.causes`` (a process died during the call);
  any extra call without a cause is counted as ``unexplained``;
- ``Evidence.problems()`` (which does not count attempts, so it holds under faults too) must be empty, and a plain
  rerun of the finished experiment must print the same result, counts included (it executes nothing);
- informative only: failed attempts that no injected fault explains (a slow attempt timed out, say), and drawn
  faults that did not fire.

The exit code is 1 if any run lost a unit, applied one twice, gave a result other than the oracle's, showed an
evidence problem, needed an unexpected rerun (a train that exited non-zero), changed on the idempotence rerun,
or raised; else 0.

Without ``--home`` a fresh home under ``/tmp`` is used and removed at the end (kept, and its path printed, when
a run failed, or with ``--keep-home``). A given ``--home`` must be reachable by the embedded Postgres's user when
running as root (see docs/getting-started.md). Its services are brought up as ``tests/conftest.py`` does
(``LocalDeployment(home).up()``) and always stopped at the end, also on an error or Ctrl-C, after every process
of a train still running (CLI, driver, run workers, sandboxes) has been killed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import stat
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from dagster import DagsterInstance

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import FaultConfig
from rl_assets.home.layout import Home
from rl_assets.home.services.local_deployment import LocalDeployment
from rl_assets.home.services.processes import processes_mentioning
from rl_assets.home.services.ray_head import LocalRayHead
from rl_assets.home.settings import HOME_ENV
from rl_assets.stores.database import Database
from rl_assets_testkit.expectations import oracle_expectation, table_of
from rl_assets_testkit.kills import (
    KILL_KINDS,
    Evidence,
    Kill,
    KillKind,
    NotReached,
    Train,
    Watch,
    kill,
    kill_train_tree,
    random_kill_point,
    ray_head_processes,
    service_pids,
    sigkill,
    train_args,
)

warnings.filterwarnings("ignore", message=".*is currently in beta.*")  # Dagster's, as in the CLI

UNEXPLAINED = "unexplained"
HANG_TRIAL_TIMEOUT_S = 6.0
"""``--trial-timeout`` when hangs are injected: a hung attempt costs this long; a normal one takes under 2 s."""


def log(message: str) -> None:
    print(f"[soak] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Drawing a run


@dataclass
class Plan:
    index: int
    kind: KillKind
    point: int
    config: ExperimentConfig
    flags: dict[str, Any]

    @property
    def faults(self) -> FaultConfig:
        names = FaultConfig.model_fields
        return FaultConfig(**{k: v for k, v in self.flags.items() if k in names})

    def describe(self) -> str:
        c = self.config
        shape = f"{c.steps}x{c.prompts}x{c.samples} (worlds {c.worlds}, turns {c.max_turns}, lr {c.lr:g})"
        faults = [f"{k.removesuffix('_rate').replace('_', '-')} {v:g}" for k, v in self.flags.items() if "rate" in k]
        if "crash_driver_at_step" in self.flags:
            faults.append(f"driver crash after s{self.flags['crash_driver_at_step']}")
        return f"{c.name} {shape}, faults: {', '.join(faults) or 'none'}"


def draw(rng: random.Random, index: int, name: str, kinds: tuple[KillKind, ...]) -> Plan:
    kind = rng.choice(kinds)
    config = ExperimentConfig(
        name=name,
        steps=rng.randint(2 if kind == "actor" else 1, 3),
        worlds=rng.randint(1, 2),
        prompts=rng.randint(1, 2),
        samples=rng.randint(1, 3),
        max_turns=rng.choice([3, 6]),
        lr=rng.choice([1.0, 2.0]),
    )
    flags: dict[str, Any] = {}
    for rate in ("flaky_trial_rate", "judge_flake_rate", "hang_trial_rate"):
        if rng.random() < 0.5:
            flags[rate] = rng.choice([0.2, 0.35, 0.5])
    if rng.random() < 0.3:
        flags["crash_driver_at_step"] = rng.randrange(config.steps)
    flags["tool_latency"] = rng.choice([0.1, 0.2, 0.3]) if kind != "trial" else rng.choice([0.3, 0.5])
    flags["judge_latency"] = rng.choice([0.1, 0.3, 0.5]) if kind != "judge" else rng.choice([1.0, 2.0])
    flags["max_concurrent_trials"] = rng.choice([1, 2, 2, 3])
    if "hang_trial_rate" in flags:
        flags["trial_timeout"] = HANG_TRIAL_TIMEOUT_S
    return Plan(index, kind, random_kill_point(rng, config), config, flags)


# ---------------------------------------------------------------------------------------------------------------
# Auditing a finished run


@dataclass
class Audit:
    wrong_result: bool
    problems: list[str]
    lost_trials: list[str]
    lost_steps: list[int]
    double_applications: int
    extra_judge_calls: int
    causes: Counter
    injected_generate_failures: int
    injected_judge_failures: int
    unexplained_failures: list[str]
    faults_not_fired: list[str]
    driver_attempts: int

    @property
    def lost_units(self) -> int:
        return len(self.lost_trials) + len(self.lost_steps)


def _attempt_rows(watch: Watch, table: str) -> list[tuple[str, int, str]]:
    """``(trial id, attempt number within its run, outcome)`` of every generation or judging attempt."""
    with watch.db.transaction() as cur:
        cur.execute(
            f"SELECT trial_id, attempt, outcome FROM {table} WHERE experiment = %s ORDER BY id", (watch.config.name,)
        )
        return cur.fetchall()


def audit(plan: Plan, watch: Watch, result: dict) -> Audit:
    config, faults = plan.config, plan.faults
    table, weights = oracle_expectation(config)  # no trial can fail for good: every fault hits attempt 0 only
    evidence = Evidence.of(watch)
    trial_ids = [t.trial_id for s in range(config.steps) for t in config.trials(s)]

    verdicts = {t for t, _, status, _ in watch.judge_calls() if status == "done"}
    rewarded = watch.rewarded()
    lost = {
        t
        for t in trial_ids
        if t not in evidence.ok_generations or t not in verdicts or watch.trial_key(t) not in rewarded
    } | set(evidence.failed_for_good)
    trained = {step for step, _, _ in watch.trained()}

    causes = Counter(evidence.causes)
    extra = evidence.judge_calls - evidence.trials
    if extra > sum(causes.values()):
        causes[UNEXPLAINED] = extra - sum(causes.values())

    unexplained, injected_generate, injected_judge = [], 0, 0
    generation = _attempt_rows(watch, "rl_generation_attempts")
    for trial_id, attempt, outcome in generation:
        if outcome != "failed":
            continue
        if attempt == 0 and (faults.trial_flakes(trial_id) or faults.trial_hangs(trial_id)):
            injected_generate += 1
        else:
            unexplained.append(f"rollout {trial_id} attempt {attempt}")
    judging = _attempt_rows(watch, "rl_judge_attempts")
    for trial_id, attempt, outcome in judging:
        if outcome != "failed":
            continue
        if attempt == 0 and faults.judge_flakes(trial_id):
            injected_judge += 1
        else:
            unexplained.append(f"judging {trial_id} attempt {attempt}")

    # Every trial is generated and judged at least once at attempt 0, so each drawn fault fires at least once.
    failed_generations = {t for t, _, outcome in generation if outcome == "failed"}
    failed_judgings = {t for t, _, outcome in judging if outcome == "failed"}
    not_fired = [f"rollout {t}" for t in trial_ids if faults.trial_flakes(t) or faults.trial_hangs(t)]
    not_fired = [n for n in not_fired if n.split()[1] not in failed_generations]
    not_fired += [f"judging {t}" for t in trial_ids if faults.judge_flakes(t) and t not in failed_judgings]
    driver_attempts = result["counts"]["driver_attempts"]
    if faults.crash_driver_at_step is not None and driver_attempts < 2:
        not_fired.append(f"driver crash after s{faults.crash_driver_at_step}")

    return Audit(
        wrong_result=table_of(result) != table or result["weights"] != weights,
        problems=evidence.problems(),
        lost_trials=sorted(lost),
        lost_steps=[s for s in range(config.steps) if s not in trained],
        double_applications=evidence.double_applications,
        extra_judge_calls=max(0, extra),
        causes=causes,
        injected_generate_failures=injected_generate,
        injected_judge_failures=injected_judge,
        unexplained_failures=unexplained,
        faults_not_fired=not_fired,
        driver_attempts=driver_attempts,
    )


# ---------------------------------------------------------------------------------------------------------------
# One soak run


@dataclass
class Outcome:
    plan: Plan
    kill: str = "-"
    """``landed``; ``late`` (landed after the experiment's last step was trained); ``missed`` (the train ended first);
    ``-`` if the run broke before its kill was decided."""
    kill_detail: str = ""
    invocations: int = 0
    nonzero_exits: list[str] = field(default_factory=list)
    audit: Audit | None = None
    rerun_changed: bool = False
    error: str | None = None
    wall_s: float = 0.0

    @property
    def failed(self) -> bool:
        a = self.audit
        return (
            self.error is not None
            or bool(self.nonzero_exits)
            or self.rerun_changed
            or a is None
            or a.wrong_result
            or bool(a.problems)
            or a.lost_units > 0
            or a.double_applications > 0
        )

    def line(self) -> str:
        p = self.plan
        kill_text = f"kill {p.kind} @{p.point}: {self.kill}" + (f" ({self.kill_detail})" if self.kill_detail else "")
        parts = [f"run {p.index:>3}  {p.describe()}", kill_text]
        if self.error is not None:
            parts.append(f"ERROR {self.error}")
        a = self.audit
        if a is not None:
            causes = ", ".join(f"{c}: {n}" for c, n in sorted(a.causes.items()))
            parts.append(
                f"result {'WRONG' if a.wrong_result else 'ok'}; lost {a.lost_units}, double {a.double_applications}, "
                f"extra judge calls {a.extra_judge_calls}" + (f" ({causes})" if causes else "")
            )
            parts.append(
                f"injected failures: rollout {a.injected_generate_failures}, judging {a.injected_judge_failures}; "
                f"drivers {a.driver_attempts}"
            )
            if a.problems:
                parts.append(f"PROBLEMS {a.problems}")
            if a.lost_trials or a.lost_steps:
                parts.append(f"LOST trials {a.lost_trials} steps {a.lost_steps}")
            if a.unexplained_failures:
                parts.append(f"note: failures no fault explains: {a.unexplained_failures}")
            if a.faults_not_fired:
                parts.append(f"note: drawn faults that did not fire: {a.faults_not_fired}")
        if self.nonzero_exits:
            parts.append(f"NON-ZERO EXITS {self.nonzero_exits}")
        if self.rerun_changed:
            parts.append("RERUN CHANGED THE RESULT")
        parts.append(
            f"{self.invocations} train invocation(s), {self.wall_s:.1f} s -> {'FAIL' if self.failed else 'ok'}"
        )
        return "\n    ".join(parts)

    def as_json(self) -> dict[str, Any]:
        p, a = self.plan, self.audit
        return {
            "index": p.index,
            "experiment": p.config.name,
            "config": p.config.model_dump(mode="json"),
            "flags": p.flags,
            "kill": {"kind": p.kind, "point": p.point, "outcome": self.kill, "detail": self.kill_detail},
            "invocations": self.invocations,
            "nonzero_exits": self.nonzero_exits,
            "error": self.error,
            "rerun_changed": self.rerun_changed,
            "wall_s": round(self.wall_s, 2),
            "failed": self.failed,
            "audit": None
            if a is None
            else {
                "wrong_result": a.wrong_result,
                "problems": a.problems,
                "lost_units": a.lost_units,
                "lost_trials": a.lost_trials,
                "lost_steps": a.lost_steps,
                "double_applications": a.double_applications,
                "extra_judge_calls": a.extra_judge_calls,
                "extra_judge_call_causes": dict(a.causes),
                "injected_generate_failures": a.injected_generate_failures,
                "injected_judge_failures": a.injected_judge_failures,
                "unexplained_failures": a.unexplained_failures,
                "faults_not_fired": a.faults_not_fired,
                "driver_attempts": a.driver_attempts,
            },
        }


class Soak:
    """The home, its stores and the train in flight (so that an interrupt can kill exactly that)."""

    def __init__(self, home: Path, db: Database, instance: DagsterInstance, run_timeout: float) -> None:
        self.home = home
        self.db = db
        self.instance = instance
        self.run_timeout = run_timeout
        self.train: Train | None = None
        self.watch: Watch | None = None

    def invoke(self, outcome: Outcome, args: list[str]) -> Train:
        self.train = Train.start(self.home, args)
        outcome.invocations += 1
        return self.train

    def finish(self, outcome: Outcome, train: Train, args: list[str]) -> dict:
        """The train's result; a non-zero exit is recorded and answered by one plain rerun, as a user would."""
        code, out, err = train.finish(self.run_timeout)
        train.close()
        if code != 0:
            last = err.strip().splitlines()[-1] if err.strip() else ""
            outcome.nonzero_exits.append(f"exit {code}: {last}")
            log(f"train exited {code}; stderr tail:\n{err[-3000:]}")
            return self.finish(outcome, self.invoke(outcome, args), args) if outcome.invocations < 3 else {}
        return json.loads(out)

    def run(self, plan: Plan, rerun_check: bool) -> Outcome:
        outcome = Outcome(plan)
        started = time.monotonic()
        config, args = plan.config, train_args(plan.config, plan.flags)
        self.watch = watch = Watch(self.db, self.instance, config)
        try:
            train = self.invoke(outcome, args)
            landed: Kill | None = None
            try:
                landed = kill(plan.kind, train, watch, self.home, after_progress=plan.point)
            except NotReached as err:
                outcome.kill, outcome.kill_detail = "missed", str(err)
            except psutil.NoSuchProcess as err:
                # wait_for's poll() reaped a CLI that exited as the kill point arrived: kill_train_tree finds no root.
                if plan.kind != "tree" or train.proc.poll() is None:
                    raise
                outcome.kill, outcome.kill_detail = "missed", f"the train exited as the point arrived ({err})"
            if landed is not None:
                outcome.kill = "late" if self._late(plan, train, watch) else "landed"
                outcome.kill_detail = f"{landed.at}; {len(landed.pids)} pid(s)"
            if plan.kind == "tree" and landed is not None:
                train.close()
                train = self.invoke(outcome, args)  # the plain rerun of the same command
            result = self.finish(outcome, train, args)
            if plan.kind == "head":
                LocalRayHead(Home(self.home)).ensure_running()  # the driver restarts it only before a train run
            if not result:
                raise RuntimeError("no result: every train invocation exited non-zero")
            outcome.audit = audit(plan, watch, result)
            if rerun_check:
                again = self.finish(outcome, self.invoke(outcome, args), args)
                outcome.rerun_changed = again != result
        except Exception as err:  # one broken run must not end a long soak; it is counted as failed
            outcome.error = f"{type(err).__name__}: {err}"
            self.kill_leftovers()
        finally:
            if self.train is not None:
                self.train.close()
            self.train = None
            outcome.wall_s = time.monotonic() - started
        return outcome

    @staticmethod
    def _late(plan: Plan, train: Train, watch: Watch) -> bool:
        """The kill came after the last step was trained (or after the train's own exit): nothing was left to hit."""
        if plan.kind == "tree":
            return train.proc.returncode == 0
        if plan.kind in ("actor", "head"):
            return len(watch.trained()) >= plan.config.steps
        return train.proc.poll() is not None

    def kill_leftovers(self) -> list[int]:
        """SIGKILL every process of the train in flight, and any other process of this home but its services."""
        killed: list[int] = []
        train, watch = self.train, self.watch
        if train is not None and watch is not None and train.proc.poll() is None:
            try:
                killed += kill_train_tree(train, watch, self.home)
            except Exception as err:  # the database may be gone already; the sweep below still finds them
                log(f"killing the train tree failed ({err}); sweeping by environment")
        services = service_pids(self.home) | {os.getpid()}
        strays = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.pid not in services and proc.environ().get(HOME_ENV) == str(self.home):
                    strays.append(proc)
            except psutil.Error:
                continue
        if strays:
            log(f"killing {len(strays)} leftover process(es) of the home: {[p.pid for p in strays]}")
            killed += sigkill(strays)
        return killed


# ---------------------------------------------------------------------------------------------------------------
# Summary


def summarize(outcomes: list[Outcome], wall_s: float, interrupted: bool) -> dict[str, Any]:
    audits = [o.audit for o in outcomes if o.audit is not None]
    causes: Counter = Counter()
    for a in audits:
        causes.update(a.causes)
    by_kind = {k: Counter(o.kill for o in outcomes if o.plan.kind == k) for k in KILL_KINDS}
    return {
        "runs": len(outcomes),
        "runs_failed": sum(1 for o in outcomes if o.failed),
        "interrupted": interrupted,
        "kills_landed": {k: c["landed"] for k, c in by_kind.items() if c["landed"]},
        "kills_late": {k: c["late"] for k, c in by_kind.items() if c["late"]},
        "kills_missed": {k: c["missed"] for k, c in by_kind.items() if c["missed"]},
        "lost_units": sum(a.lost_units for a in audits),
        "double_applications": sum(a.double_applications for a in audits),
        "extra_judge_calls": sum(a.extra_judge_calls for a in audits),
        "extra_judge_call_causes": dict(causes),
        "wrong_results": sum(1 for a in audits if a.wrong_result),
        "evidence_problems": sum(1 for a in audits if a.problems),
        "runs_without_result": sum(1 for o in outcomes if o.audit is None),
        "nonzero_exits": sum(len(o.nonzero_exits) for o in outcomes),
        "rerun_changed": sum(1 for o in outcomes if o.rerun_changed),
        "errors": sum(1 for o in outcomes if o.error is not None),
        "injected_generate_failures": sum(a.injected_generate_failures for a in audits),
        "injected_judge_failures": sum(a.injected_judge_failures for a in audits),
        "driver_crashes_drawn": sum(1 for o in outcomes if "crash_driver_at_step" in o.plan.flags),
        "unexplained_failures": sum(len(a.unexplained_failures) for a in audits),
        "faults_not_fired": sum(len(a.faults_not_fired) for a in audits),
        "train_invocations": sum(o.invocations for o in outcomes),
        "trials": sum(o.plan.config.steps * o.plan.config.prompts * o.plan.config.samples for o in outcomes),
        "wall_s": round(wall_s, 1),
    }


def report(s: dict[str, Any], seed: int) -> str:
    def by(counts: dict[str, int]) -> str:
        total = sum(counts.values())
        return f"{total}" + (f"  ({', '.join(f'{k}: {n}' for k, n in counts.items())})" if counts else "")

    rows = [
        ("runs", f"{s['runs']} (seed {seed}{', INTERRUPTED' if s['interrupted'] else ''}), {s['trials']} trials"),
        ("kills landed", by(s["kills_landed"])),
        ("kills after the last step", by(s["kills_late"])),
        ("kills missed (train ended first)", by(s["kills_missed"])),
        ("lost units", str(s["lost_units"])),
        ("double applications", str(s["double_applications"])),
        ("extra judge calls", by(s["extra_judge_call_causes"])),
        ("results differing from the oracle", str(s["wrong_results"])),
        ("runs with evidence problems", str(s["evidence_problems"])),
        ("runs without a result / errors", f"{s['runs_without_result']} / {s['errors']}"),
        ("non-zero train exits", str(s["nonzero_exits"])),
        ("idempotence reruns that changed", str(s["rerun_changed"])),
        (
            "injected faults survived",
            f"rollout {s['injected_generate_failures']}, judging {s['injected_judge_failures']}, "
            f"driver crashes drawn {s['driver_crashes_drawn']}",
        ),
        ("failures no fault explains (info)", str(s["unexplained_failures"])),
        ("drawn faults that did not fire (info)", str(s["faults_not_fired"])),
        ("train invocations", str(s["train_invocations"])),
        ("wall time", f"{s['wall_s']:.1f} s"),
        ("verdict", "FAIL" if s["runs_failed"] else "ok"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


# ---------------------------------------------------------------------------------------------------------------
# Home and main


def remove_home(root: Path) -> None:
    def writable_then_retry(func, path, _exc) -> None:
        parent = os.path.dirname(path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        func(path)

    shutil.rmtree(root, onerror=writable_then_retry)


def stop_services(home: Path) -> list[str]:
    """``LocalDeployment.down()``, then SIGKILL whatever of the home's services it left."""
    stopped = LocalDeployment(Home(home)).down()
    left = [*ray_head_processes(home), *processes_mentioning(str(Home(home).postgres_data))]
    left = list({p.pid: p for p in left if p.pid != os.getpid()}.values())
    if left:
        names = []
        for p in left:
            try:
                names.append(f"{p.pid} {' '.join(p.cmdline())[:100]}")
            except psutil.Error:
                names.append(str(p.pid))
        log(f"LocalDeployment.down() left {len(left)} process(es) of the home; killing them: {names}")
        sigkill(left)
    return stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="soak runs (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="soak seed (default: drawn and printed)")
    parser.add_argument("--first", type=int, default=0, help="index of the first run (replay: --first I --runs 1)")
    parser.add_argument("--kinds", default=",".join(KILL_KINDS), help="kill kinds to draw from, comma-separated")
    parser.add_argument("--home", help="home directory to use (default: a fresh one under /tmp, removed at the end)")
    parser.add_argument("--keep-home", action="store_true", help="keep the fresh home at the end")
    parser.add_argument("--run-timeout", type=float, default=900.0, help="longest wait for one train invocation")
    parser.add_argument("--no-rerun-check", action="store_true", help="skip the plain rerun of each finished run")
    parser.add_argument("--fail-fast", action="store_true", help="stop after the first failed run")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = set(kinds) - set(KILL_KINDS)
    if unknown or not kinds:
        parser.error(f"--kinds: unknown {sorted(unknown)}; choose from {','.join(KILL_KINDS)}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    if not 0 <= seed < 10**9:
        parser.error("--seed: must be in [0, 10**9)")

    fresh = args.home is None
    if fresh:
        # Not under a 0700 directory: as root, the embedded Postgres runs as its own user and must reach it.
        root = Path(tempfile.mkdtemp(prefix="rl-assets-soak-", dir="/tmp"))
        root.chmod(0o755)
        home = root / "home"
    else:
        root = home = Path(args.home).expanduser().resolve()
    session = f"{int(time.time()) % 46656:x}"  # experiment names unique within a reused home
    started = time.monotonic()
    outcomes: list[Outcome] = []
    interrupted = False

    def terminate(signum, _frame) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    soak: Soak | None = None
    try:
        log(f"seed {seed}; home {home}; bringing its services up")
        LocalDeployment(Home(home)).up()
        db = Database.from_env()
        with DagsterInstance.get() as instance:
            soak = Soak(home, db, instance, args.run_timeout)
            for index in range(args.first, args.first + args.runs):
                plan = draw(random.Random(f"{seed}:{index}"), index, f"soak-{seed}-{index}-{session}", kinds)
                log(f"run {index}: {plan.describe()}; kill {plan.kind} at {plan.point}")
                outcome = soak.run(plan, rerun_check=not args.no_rerun_check)
                outcomes.append(outcome)
                print(outcome.line(), file=sys.stderr if args.json else sys.stdout, flush=True)
                if outcome.failed and args.fail_fast:
                    break
        db.close()
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted; stopping what is running")
    finally:
        if soak is not None:
            soak.kill_leftovers()
        stopped = stop_services(home)
        log(f"stopped: {', '.join(stopped) or 'nothing was running'}")

    summary = summarize(outcomes, time.monotonic() - started, interrupted)
    failed = summary["runs_failed"] > 0 or interrupted
    if fresh and not args.keep_home and not failed:
        remove_home(root)
        shutil.rmtree(Home(home).runtime, ignore_errors=True)  # the sockets' short path, outside the home
    elif fresh:
        log(f"home kept: {home}")
    if args.json:
        print(
            json.dumps({"seed": seed, "home": str(home), "summary": summary, "runs": [o.as_json() for o in outcomes]})
        )
    else:
        print()
        print(report(summary, seed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
