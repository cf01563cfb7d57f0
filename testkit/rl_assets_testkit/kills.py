"""Kill real processes of an ``rl-assets train`` at chosen points of durable progress, and audit what survived.

Shared by ``tests/test_kills.py``, ``tests/test_concurrency.py`` and ``benchmarks/soak.py``. Every wait here
polls durable state (the ledgers in Postgres, Dagster's run storage) against a deadline: a kill lands where
the records say the run is, never where a sleep hopes it is.

The processes that train an experiment:

- the ``train`` CLI, which follows and restarts a dead daemon;
- the home's daemon, the driver: ``dagster-daemon`` and, in its session, its code server (where the driver
  sensor runs) and the run launcher's forkserver;
- run workers, forked by the forkserver into their own sessions (they outlive the daemon): found by the
  ``rl/worker_pid`` tag (``pid@start-time``) of the experiment's active runs, as run monitoring finds them;
- one sandbox per rollout attempt, a child of its worker (it dies with it: ``PR_SET_PDEATHSIG``).

The home's Postgres and Ray head are never part of that tree: its Postgres (the postmaster names the data
directory) and its Ray head (processes naming the head's temp dir, their descendants such as the trainer
actor, and the head's Ray client server, which names the head's GCS port).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import dagster as dg
import psutil
from dagster import DagsterInstance, DagsterRun, RunsFilter

from rl_assets.assets.partitions import trial_partition_key
from rl_assets.assets.rollout_batches import batch_members
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.run_tags import EXPERIMENT_TAG, PARTITION_TAG, WORKER_PID_TAG
from rl_assets.domain.waiting import Waiting
from rl_assets.driver.planner import ACTIVE_STATUSES
from rl_assets.home.layout import Home
from rl_assets.home.services.daemon import LocalDaemon
from rl_assets.home.services.processes import identity_alive
from rl_assets.home.services.ray_head import LocalRayHead
from rl_assets.stores.database import Database

DEADLINE_S = 300.0
"""Longest wait for a durable state; far above any state's normal arrival, so only a real hang trips it."""
POLL_S = 0.05
REAPED_MESSAGE = "the run's worker process died"
DIED_DURING_CALL = "process died during the call"

T = TypeVar("T")


class NotReached(Exception):
    """The awaited state did not arrive: the train process ended first, or the deadline passed."""


def processes_mentioning(marker: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``marker``: a cross-check by name, never a handle on a service."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] == os.getpid():
            continue
        if any(marker in part for part in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def wait_for(
    probe: Callable[[], T],
    what: str,
    timeout: float = DEADLINE_S,
    while_running: subprocess.Popen | None = None,
) -> T:
    """Poll ``probe`` until it returns something truthy; that value is returned.

    With ``while_running``, give up as soon as that process has exited (the state can no longer arrive).
    The short sleep between polls is the polling interval, not synchronisation: the condition decides.
    """
    deadline = Waiting(timeout_s=timeout, interval_s=POLL_S).deadline()
    while True:
        value = probe()
        if value:
            return value
        if while_running is not None and while_running.poll() is not None:
            value = probe()  # it may have arrived just before the exit
            if value:
                return value
            raise NotReached(f"{what}: the train process exited ({while_running.returncode}) first")
        if deadline.expired():
            raise NotReached(f"{what}: not within {timeout:.0f} s")
        deadline.sleep()


# --- the train command -------------------------------------------------------------------------------------


def train_args(config: ExperimentConfig, flags: dict[str, Any] | None = None) -> list[str]:
    """The full ``train`` arguments of ``config`` plus runtime flags: the same command on every rerun."""
    args = ["--experiment", config.name]
    for name in (
        "steps",
        "worlds",
        "prompts",
        "samples",
        "lr",
        "max_turns",
        "rubric",
        "generate_retries",
        "judge_retries",
        "failed_trial_policy",
    ):
        args += [f"--{name.replace('_', '-')}", str(getattr(config, name))]
    for name, value in (flags or {}).items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args


def cli_command(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "rl_assets.cli", *args, "--home", str(home)]


@dataclass
class Train:
    """One ``rl-assets train --json`` process. Its stderr goes to a file: progress lines must never fill a pipe."""

    proc: subprocess.Popen
    err_path: Path

    @classmethod
    def start(cls, home: Path, args: list[str], command: str = "train") -> Train:
        """Start ``rl-assets <command> ... --json`` (``train``, or ``rescore``/``fork``, which drive the same way)."""
        fd, name = tempfile.mkstemp(prefix=f"rl-{command}-", suffix=".err")
        with os.fdopen(fd, "w") as err:
            proc = subprocess.Popen(
                cli_command(home, command, *args, "--json"),
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
            )
        return cls(proc, Path(name))

    def finish(self, timeout: float = 900) -> tuple[int, str, str]:
        """``(exit code, stdout, stderr)`` once it exits."""
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            raise AssertionError(f"train did not finish within {timeout:.0f} s:\n{self.stderr()[-3000:]}") from None
        return self.proc.returncode, out or "", self.stderr()

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.err_path.unlink(missing_ok=True)


def run_train(home: Path, args: list[str], timeout: float = 900, command: str = "train") -> tuple[int, str, str]:
    """Run ``<command> --json`` (``train`` by default) to its end: ``(exit code, stdout, stderr)``."""
    proc = subprocess.run(
        cli_command(home, command, *args, "--json"),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout, proc.stderr


# --- durable state -----------------------------------------------------------------------------------------


class Watch:
    """The durable state of one experiment, read afresh on every call (ledgers and Dagster's run storage)."""

    def __init__(self, db: Database, instance: DagsterInstance, config: ExperimentConfig) -> None:
        self.db = db
        self.instance = instance
        self.config = config

    def _rows(self, sql: str, *params: object) -> list[tuple]:
        with self.db.transaction() as cur:
            cur.execute(sql, (self.config.name, *params))
            return cur.fetchall()

    def generation_attempts(self) -> list[tuple[str, str, str]]:
        """``(trial id, identity, outcome)`` of every recorded rollout attempt, in order."""
        return self._rows(
            "SELECT trial_id, identity, outcome FROM rl_generation_attempts WHERE experiment = %s ORDER BY id"
        )

    def judge_calls(self) -> list[tuple[str, str, str, str | None]]:
        """``(trial id, verdict key, status, cause)`` of every paid judge call, in order."""
        return self._rows(
            "SELECT trial_id, verdict_key, status, cause FROM rl_judge_calls WHERE experiment = %s ORDER BY id"
        )

    def unfinished(self, table: str) -> list[tuple[str, float]]:
        """``(trial id, start epoch)`` of rollout attempts still ``running`` or judge calls still ``claimed``."""
        status = {"rl_generation_attempts": "outcome = 'running'", "rl_judge_calls": "status = 'claimed'"}[table]
        return self._rows(
            f"SELECT trial_id, extract(epoch FROM started_at) FROM {table} WHERE experiment = %s AND {status} "
            "ORDER BY id"
        )

    def trained(self) -> list[tuple[int, int, str]]:
        """``(step, actor pid, policy hash)`` of every ledgered step."""
        return self._rows(
            "SELECT step, actor_pid, policy_hash FROM rl_train_ledger WHERE experiment = %s AND rubric = %s "
            "ORDER BY step",
            self.config.rubric,
        )

    def failed_for_good(self) -> list[str]:
        return sorted(r[0] for r in self._rows("SELECT trial_id FROM rl_trial_failures WHERE experiment = %s"))

    def rewarded(self) -> set[str]:
        """Trial partition keys of the experiment whose reward is materialized (what the planner counts ok)."""
        keys = self.instance.get_materialized_partitions(dg.AssetKey("rewards"))
        return {k for k in keys if k.startswith(f"{self.config.name}/")}

    def materializations(self, asset: str, key: str) -> int:
        """How many times the asset's partition ``key`` was materialized."""
        records = self.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]), limit=100
        ).records
        return len(records)

    def progress(self) -> int:
        """A monotone count of durable events: rollout attempts, judge calls, rewards, trained steps."""
        counts = self._rows(
            "SELECT (SELECT count(*) FROM rl_generation_attempts WHERE experiment = %s) "
            "+ (SELECT count(*) FROM rl_judge_calls WHERE experiment = %s) "
            "+ (SELECT count(*) FROM rl_train_ledger WHERE experiment = %s)",
            self.config.name,
            self.config.name,
        )
        return int(counts[0][0]) + len(self.rewarded())

    def runs(self) -> list[DagsterRun]:
        return list(self.instance.get_runs(filters=RunsFilter(tags={EXPERIMENT_TAG: self.config.name})))

    def active_runs(self) -> list[DagsterRun]:
        return [r for r in self.runs() if r.status in ACTIVE_STATUSES]

    def trial_key(self, trial_id: str) -> str:
        step, slot = trial_id.split("-", 1)
        return str(trial_partition_key(self.config, int(step.removeprefix("s")), slot))

    def trial_id(self, key: str) -> str:
        """A trial partition key's trial id: ``exp/s0|p1-n0`` -> ``s0-p1-n0``."""
        step_key, slot = key.split("|")
        return f"{step_key.rsplit('/', 1)[1]}-{slot}"

    def run_of_trial(self, trial_id: str) -> DagsterRun | None:
        """The active run carrying a trial (its own, or a rollout run of its step), once its worker is tagged."""
        key = self.trial_key(trial_id)
        for run in self.active_runs():
            carries = run.tags.get(PARTITION_TAG) == key or key in batch_members(run.run_config)
            if carries and WORKER_PID_TAG in run.tags:
                return run
        return None

    def run_status(self, run_id: str) -> dg.DagsterRunStatus:
        run = self.instance.get_run_by_id(run_id)
        assert run is not None
        return run.status

    def failure_message(self, run_id: str) -> str:
        """The message of the run's RUN_FAILURE event ('' if it has none)."""
        for record in self.instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE):
            return record.message or ""
        return ""


def worker_of(run: DagsterRun) -> psutil.Process | None:
    """The live process named by a run's ``rl/worker_pid`` tag (pid and start time must both match)."""
    identity = run.tags.get(WORKER_PID_TAG)
    if identity is None:
        return None
    if not identity_alive(identity):
        return None
    try:
        return psutil.Process(int(identity.partition("@")[0]))
    except psutil.Error:
        return None


def sandboxes_of(worker: psutil.Process) -> list[psutil.Process]:
    """The worker's live sandbox processes (the keeper, bubblewrap, and the agent inside)."""
    try:
        return [p for p in worker.children(recursive=True) if alive(p)]
    except psutil.Error:
        return []


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a killed process whose parent has not reaped it yet is gone)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _descendants(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    found: dict[int, psutil.Process] = {}
    for proc in procs:
        found.setdefault(proc.pid, proc)
        try:
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            pass
    return list(found.values())


def ray_head_processes(home: Path) -> list[psutil.Process]:
    """Every process of the home's Ray head: those naming its temp dir, their descendants (raylet's workers,
    the trainer actors, the agents), and its Ray client server (which names only the head's GCS port)."""
    head = LocalRayHead(Home(home))
    procs = _descendants(processes_mentioning(str(head.temp_dir)))
    address = head.address()
    if address is not None:
        port = address.rsplit(":", 1)[1]
        for proc in processes_mentioning(f":{port}"):
            try:
                cmdline = proc.cmdline()
            except psutil.Error:
                continue
            if "ray.util.client.server" in cmdline and any(
                a.startswith("--address=") and a.endswith(f":{port}") for a in cmdline
            ):
                procs.append(proc)
    return list({p.pid: p for p in procs}.values())


def service_pids(home: Path) -> set[int]:
    """Pids of the home's services (Postgres, Ray head): never part of a train's process tree."""
    postgres = _descendants(processes_mentioning(str(Home(home).postgres_data)))
    return {p.pid for p in [*postgres, *ray_head_processes(home)]}


def sigkill(procs: Iterable[psutil.Process], timeout: float = 30) -> list[int]:
    """SIGKILL every process, in the order given, and wait until each is gone (a zombie counts as gone)."""
    procs = list({p.pid: p for p in procs}.values())
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    deadline = Waiting(timeout_s=timeout, interval_s=POLL_S).deadline()
    while living := [p for p in procs if alive(p)]:
        if deadline.expired():
            raise AssertionError(f"still alive {timeout:.0f} s after SIGKILL: {[p.pid for p in living]}")
        deadline.sleep()
    return [p.pid for p in procs]


def sigkill_tree(roots: Iterable[psutil.Process], spare: Iterable[int] = ()) -> list[int]:
    """SIGKILL ``roots`` and all their descendants but ``spare``, with none forking past the kill.

    A snapshot of a tree goes stale while it is killed: a worker can start a child (a container runtime's
    client creating a sidecar) after the snapshot and before its own SIGKILL, and that child lives on. So the
    tree is stopped first (a stopped process forks nothing), scanned again until a pass finds no process it
    had not stopped, and only then killed.
    """
    spare = set(spare)
    stopped: dict[int, psutil.Process] = {}
    while found := [
        p for p in _descendants([*roots, *stopped.values()]) if p.pid not in spare and p.pid not in stopped
    ]:
        for proc in found:
            try:
                proc.send_signal(signal.SIGSTOP)
            except psutil.Error:
                pass
            stopped[proc.pid] = proc
    return sigkill(stopped.values())


def kill_train_tree(train: Train, watch: Watch, home: Path) -> list[int]:
    """SIGKILL everything that trains the experiment: the CLI first (it restarts no daemon), then the daemon's
    session (it launches no more workers), then every run worker of the experiment and its sandboxes.

    A worker forked just before its daemon died may be tagged on its run only later, so the experiment's
    active runs are scanned again until a pass finds no live worker.
    """
    services = service_pids(home)
    killed = sigkill_tree([psutil.Process(train.proc.pid)], spare=services)
    daemon = LocalDaemon(Home(home)).session()
    killed += sigkill_tree(daemon.members() if daemon is not None else [], spare=services)
    train.proc.wait()
    for _ in range(20):
        workers = [w for w in (worker_of(r) for r in watch.active_runs()) if w is not None]
        if not (pids := sigkill_tree(workers, spare=services)):
            break
        killed += pids
    return killed


def driver_of(home: Path) -> psutil.Process | None:
    """The home's live daemon, the driver."""
    return LocalDaemon(Home(home)).process()


def actor_process(pid: int) -> psutil.Process:
    """The trainer actor's process, checked to be a Ray worker (never SIGKILL a reused pid)."""
    proc = psutil.Process(pid)
    title = " ".join(proc.cmdline())
    assert "TrainerActor" in title or "ray" in title, f"pid {pid} is not a Ray actor: {title!r}"
    return proc


# --- kill points -------------------------------------------------------------------------------------------

KillKind = Literal["tree", "trial", "judge", "actor", "head"]
KILL_KINDS: tuple[KillKind, ...] = ("tree", "trial", "judge", "actor", "head")


def durable_events(config: ExperimentConfig) -> int:
    """The durable events of a clean run: an attempt, a judge call and a reward per trial, a row per step."""
    return 3 * config.steps * config.prompts * config.samples + config.steps


@dataclass(frozen=True)
class Kill:
    """What one kill hit: its kind, where it landed, the pids it killed, the runs it left active."""

    kind: KillKind
    at: str
    pids: list[int]
    runs_left_active: list[str] = field(default_factory=list)
    """Runs the kill left active whose worker it killed: run monitoring must fail each, saying why."""
    trial_id: str | None = None


def kill(kind: KillKind, train: Train, watch: Watch, home: Path, after_progress: int = 0) -> Kill:
    """Wait until at least ``after_progress`` durable events exist and the kind's target is live, then SIGKILL it.

    - ``tree``: the train's whole process tree;
    - ``trial``: the run worker of a trial whose rollout attempt is recorded running and whose sandbox is up;
    - ``judge``: the run worker of a trial whose judge call is recorded ``claimed`` (paid, not yet recorded);
    - ``actor``: the trainer actor of the experiment (pid from the training ledger);
    - ``head``: every process of the home's Ray head.

    Raises :class:`NotReached` if the train ends before the target appears.
    """
    proc = train.proc
    wait_for(lambda: watch.progress() >= after_progress, f"{after_progress} durable events", while_running=proc)
    at = f"after {watch.progress()} durable events"
    if kind == "tree":
        killed = kill_train_tree(train, watch, home)
        # Runs whose worker was killed; a run still queued had none, and the next daemon simply launches it.
        with_worker = [r.run_id for r in watch.active_runs() if WORKER_PID_TAG in r.tags]
        return Kill(kind, at, killed, with_worker)
    if kind in ("trial", "judge"):
        worker, run, trial_id = wait_for(
            lambda: target_worker(watch, kind), f"a {kind} worker to kill", while_running=proc
        )
        pids = sigkill_tree([worker])  # the worker and its sandboxes, none started past the kill
        return Kill(kind, f"{at}, {trial_id} {'mid-rollout' if kind == 'trial' else 'mid-call'}", pids, [run], trial_id)
    if kind == "actor":
        step, pid, _ = wait_for(lambda: (watch.trained() or [None])[-1], "a trained step", while_running=proc)
        return Kill(kind, f"{at}, after step {step} was trained", sigkill([actor_process(pid)]))
    procs = ray_head_processes(home)
    assert procs, f"no Ray head process of {home} found"
    return Kill(kind, at, sigkill(procs))


def target_worker(watch: Watch, kind: KillKind) -> tuple[psutil.Process, str, str] | None:
    """A live worker in the middle of a rollout (``trial``) or of a judge call (``judge``).

    A row left unfinished by an earlier kill stays unfinished for ever; only a row that the trial's current
    run started (after that run's start) says the current run is inside the window.
    """
    table = "rl_generation_attempts" if kind == "trial" else "rl_judge_calls"
    for trial_id, started in watch.unfinished(table):
        run = watch.run_of_trial(trial_id)
        worker = worker_of(run) if run is not None else None
        if run is None or worker is None:
            continue
        record = watch.instance.get_run_record_by_id(run.run_id)
        if record is None or record.start_time is None or float(started) < record.start_time:
            continue
        if kind == "trial" and not any(_is_runner(p) for p in sandboxes_of(worker)):
            continue  # the attempt is recorded but its sandbox is not up yet: not mid-rollout
        return worker, run.run_id, trial_id
    return None


def _is_runner(proc: psutil.Process) -> bool:
    try:
        return "/app/main.py" in proc.cmdline()  # the rollout's agent, inside its sandbox
    except psutil.Error:
        return False


def random_kill_point(rng: random.Random, config: ExperimentConfig) -> int:
    """A durable-progress point strictly inside a clean run of ``config``."""
    return rng.randrange(1, durable_events(config))


# --- expectations and evidence -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """What the ledgers say was executed, against what a run of ``config`` needs exactly once."""

    trials: int
    steps: int
    ok_generations: Counter
    """trial id -> rollout attempts that finished ok (must be 1 each: a completed rollout is never redone)."""
    unfinished_generations: int
    """Attempts left ``running``: killed mid-rollout; each one is a rollout the crash lost, redone once."""
    done_calls: Counter
    """verdict key -> judge calls recorded done (must be 1 each: a recorded verdict is never paid again)."""
    claimed_calls: int
    """Calls left ``claimed``: a process died during the call; each is one counted, unavoidable extra call."""
    judge_calls: int
    causes: Counter
    train_rows: int
    failed_for_good: list[str]

    @classmethod
    def of(cls, watch: Watch) -> Evidence:
        config = watch.config
        attempts = watch.generation_attempts()
        calls = watch.judge_calls()
        causes = Counter(cause for _, _, _, cause in calls if cause)  # as `rl-assets report` counts them
        claimed = sum(1 for _, _, status, _ in calls if status == "claimed")
        if claimed:
            causes[DIED_DURING_CALL] = claimed
        return cls(
            trials=config.steps * config.prompts * config.samples,
            steps=config.steps,
            ok_generations=Counter(t for t, _, outcome in attempts if outcome == "ok"),
            unfinished_generations=sum(1 for _, _, outcome in attempts if outcome == "running"),
            done_calls=Counter(key for _, key, status, _ in calls if status == "done"),
            claimed_calls=claimed,
            judge_calls=len(calls),
            causes=causes,
            train_rows=len(watch.trained()),
            failed_for_good=watch.failed_for_good(),
        )

    @property
    def double_generations(self) -> list[str]:
        return sorted(t for t, n in self.ok_generations.items() if n > 1)

    @property
    def double_verdicts(self) -> list[str]:
        return sorted(k for k, n in self.done_calls.items() if n > 1)

    @property
    def double_applications(self) -> int:
        """Completed units executed again: rollouts, verdicts, train steps beyond one each."""
        return (
            sum(n - 1 for n in self.ok_generations.values() if n > 1)
            + sum(n - 1 for n in self.done_calls.values() if n > 1)
            + max(0, self.train_rows - self.steps)
        )

    def problems(self) -> list[str]:
        """Every way the ledgers differ from 'each unit done exactly once, extra calls only where counted'."""
        found = []
        if self.double_generations:
            found.append(f"rollouts completed twice: {self.double_generations}")
        if len(self.ok_generations) != self.trials:
            found.append(f"{len(self.ok_generations)} of {self.trials} trials have a completed rollout")
        if self.double_verdicts:
            found.append(f"verdicts paid twice after being recorded: {self.double_verdicts}")
        if len(self.done_calls) != self.trials:
            found.append(f"{len(self.done_calls)} of {self.trials} trials have a recorded verdict")
        if self.judge_calls != self.trials + self.claimed_calls:
            found.append(f"judge_calls {self.judge_calls} != trials {self.trials} + claimed {self.claimed_calls}")
        if self.train_rows != self.steps:
            found.append(f"train_applications {self.train_rows} != steps {self.steps}")
        if self.failed_for_good:
            found.append(f"trials failed for good: {self.failed_for_good}")
        return found
