"""``rollout_job``: many trials in one run, each in a thread of its worker, each with its own records.

A trial spends nearly all its time waiting: on its model server, on its tools, on the judge. A run and a
worker process per trial (``trial_job``) pays a Dagster run's events and a Python process for every trial
that waits; this run carries a step's pending trials together. Each trial still:

- runs exactly the code of the ``trajectories`` and ``rewards`` assets (:func:`trajectory_of`,
  :func:`reward_of_trial`), in its own sandbox process on its own fork, with its own generation and
  judging records, cost rows and retries (``generate_retries``, ``judge_retries``);
- has its partitions materialized, with the same metadata, transcript and asset-check evaluations, the
  moment it ends: the UI's partition grid fills trial by trial, and each materialization names this run.

So a SIGKILL of the worker loses only the attempts in flight: a trial that ended is materialized, and the
driver launches only the others again (as the planner counts it, each lost trial's run failed once). The
run itself has no run retries (its trials are retried by the driver, one by one). A trial that fails for
good fails the run at its end, after every other trial has ended; a trial whose reward breaks a blocking
check is failed for good at once (its verdict is in the ledger, so judging it again gives the same).

Each trial judges holding a slot of the ``judge`` pool in the instance's concurrency storage, as a
judge step of a run of its own does, so ``dagster instance concurrency set judge N`` bounds judge calls
across every run; a slot is handed from a trial to the next of the run unless another run's step waits for
one (:class:`_JudgePool`); a killed worker's slots are freed with its run (``free_slots_after_run_end_seconds``).

On Kubernetes a batch is two runs, as a trial run is two step pods: a ``rollout_pods_job`` run
(``rollout_only``) whose worker drives each attempt's sandbox pod with the cluster's token and no judge key,
then a judge-only ``rollout_job`` run whose worker has the key and no token (the driver's sensor splits them).
"""

import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pydantic
from sqlalchemy.exc import SQLAlchemyError

from rl_assets.assets import pools
from rl_assets.assets.partitions import parse_trial_partition
from rl_assets.assets.rewards import reward_of_trial, rewards
from rl_assets.assets.trajectories import trajectories, trajectory_of
from rl_assets.assets.unit_run import UnitRun
from rl_assets.resources.judge import JudgeResource
from rl_assets.resources.stores import StoresResource
from rl_assets.resources.world_store import WorldStoreResource
from rl_assets.stores.home_stores import Stores

OP_NAME = "roll_out_trials"
ROLLOUT_PODS_JOB = "rollout_pods_job"
"""The job whose worker only rolls out (Kubernetes: it has the token and no judge key)."""
POOL_POLL_S = 0.05
POOL_POLL_MAX_S = 1.0
"""A trial waiting for a judge slot asks again after this long, doubling up to the most."""
DATA_VERSION_TAG = "dagster/data_version"
DATA_VERSION_IS_USER_PROVIDED_TAG = "dagster/data_version_is_user_provided"
CODE_VERSION_TAG = "dagster/code_version"
INPUT_DATA_VERSION_TAG = "dagster/input_data_version/"
INPUT_EVENT_POINTER_TAG = "dagster/input_event_pointer/"
"""The tags of a materialization's provenance, as Dagster writes them for an asset's own step: what its
staleness (the UI's "stale" flags, a rubric change making rewards stale and nothing upstream) is read from."""


class RolloutBatchConfig(dg.Config):
    trials: list[str]
    """The trials' partition keys (``exp/s0|p1-n0``), all of one step."""
    judge_only: bool = False
    """Judgments only: the trials' stored trajectories are judged, nothing is generated (a re-scoring, or on
    Kubernetes the judging of trials a ``rollout_only`` run rolled out)."""
    rollout_only: bool = False
    """Rollouts only: each trial's trajectory is materialized and nothing is judged. On Kubernetes a rollout run
    drives the sandbox pods with the cluster's token, and the judge's key goes only to the ``judge_only`` run
    that judges them (as a trial run's two steps are two pods)."""

    @pydantic.model_validator(mode="after")
    def _one_half(self) -> "RolloutBatchConfig":
        if self.judge_only and self.rollout_only:
            raise ValueError("a rollout run is judge_only or rollout_only, not both")
        return self


def batch_run_config(trials: list[str], judge_only: bool, rollout_only: bool = False) -> dict:
    config = {"trials": trials, "judge_only": judge_only, "rollout_only": rollout_only}
    return {"ops": {OP_NAME: {"config": config}}}


def batch_members(run_config: dict) -> list[str]:
    """The trial partition keys a rollout run carries, from its run config."""
    return list(run_config.get("ops", {}).get(OP_NAME, {}).get("config", {}).get("trials", []))


@dataclass
class _Ended:
    key: str
    events: list = field(default_factory=list)
    error: str | None = None
    """Why the trial did not end with a reward (None when it did, or when it failed for good on a check)."""


class _QueueLog:
    """A trial thread's log: its lines go to the op's thread, the only one that writes to the event log."""

    def __init__(self, out: queue.Queue) -> None:
        self.out = out

    def info(self, msg: str) -> None:
        self.out.put(("info", msg))

    def warning(self, msg: str) -> None:
        self.out.put(("warning", msg))


def _attempts(fn: Callable[[UnitRun], dg.MaterializeResult], key: str, log: _QueueLog, tags) -> dg.MaterializeResult:
    """``fn`` for attempt 0, 1, ... as Dagster retries a step: while it requests a retry and has retries left."""
    attempt = 0
    while True:
        try:
            return fn(UnitRun(key, attempt, log, tags))
        except dg.RetryRequested as retry:
            if attempt >= retry.max_retries:
                raise
            attempt += 1
            time.sleep(retry.seconds_to_wait or 0)


class _Provenance:
    """The provenance tags of a materialization made in this run, as the asset's own step would record them.

    For each parent asset: the storage id of its latest materialization (or observation, for the rubrics
    source) when the trial's record is made, and that event's data version. A partitioned parent's newer
    events are what make a partition stale; an unpartitioned one's data version.
    """

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance = instance
        self.assets = {"trajectories": trajectories, "rewards": rewards}
        """The asset definitions themselves, not the run's repository: a job executed in process has none."""

    def inputs(self, asset: str) -> dict[str, str]:
        """The asset's code version and input tags: its parents' latest events, read now (one query)."""
        definition = self.assets[asset]
        parents = sorted(definition.dependency_keys)
        records = {r.asset_entry.asset_key: r.asset_entry for r in self.instance.get_asset_records(parents)}
        tags = {CODE_VERSION_TAG: str(definition.code_versions_by_key[dg.AssetKey(asset)])}
        for parent in parents:
            entry = records.get(parent)
            event = entry and (entry.last_materialization_record or entry.last_observation_record)
            found = event and (event.asset_materialization or event.asset_observation)
            # A materialization reported by hand (the UI's "Report materialization", a runless event) may have
            # no tags at all, hence no data version: as Dagster's own step reads it, INITIAL.
            tags[INPUT_DATA_VERSION_TAG + parent.to_user_string()] = (
                (found.tags or {}).get(DATA_VERSION_TAG, "INITIAL") if found else "INITIAL"
            )
            tags[INPUT_EVENT_POINTER_TAG + parent.to_user_string()] = str(event.storage_id) if event else "NULL"
        return tags

    def recorded(self, ended: list[_Ended]) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
        """The ended trials' events with their provenance, every trajectory first.

        Each asset's parents are read once for the whole batch, after the trajectories are logged: a reward's
        pointer to the trajectories is then at least as new as its own trial's trajectory, as its own step's
        would be. Read per materialization, this was an eighth of a 256-trial worker's CPU.
        """
        trajectories = [e for item in ended for e in item.events if _of(e, "trajectories")]
        rest = [e for item in ended for e in item.events if not _of(e, "trajectories")]
        for asset, events in (("trajectories", trajectories), ("rewards", rest)):
            inputs = self.inputs(asset) if any(_of(e, asset) for e in events) else {}
            for event in events:  # in each trial's order: a check follows the materialization it evaluates
                yield self._tagged(event, inputs) if isinstance(event, dg.AssetMaterialization) else event

    @staticmethod
    def _tagged(event: dg.AssetMaterialization, inputs: dict[str, str]) -> dg.AssetMaterialization:
        tags = dict(inputs)
        if (data_version := (event.tags or {}).get(DATA_VERSION_TAG)) is not None:
            tags[DATA_VERSION_TAG] = data_version
            tags[DATA_VERSION_IS_USER_PROVIDED_TAG] = "true"
        return dg.AssetMaterialization(event.asset_key, partition=event.partition, metadata=event.metadata, tags=tags)


def _of(event: object, asset: str) -> bool:
    return isinstance(event, dg.AssetMaterialization) and event.asset_key.path == [asset]


def _materialization(asset: str, key: str, result: dg.MaterializeResult) -> dg.AssetMaterialization:
    """The asset's materialization of one trial; its provenance tags are added as it is logged."""
    tags = {} if result.data_version is None else {DATA_VERSION_TAG: result.data_version.value}
    return dg.AssetMaterialization(asset, partition=key, metadata=dict(result.metadata or {}), tags=tags)


def _evaluations(key: str, result: dg.MaterializeResult) -> list[dg.AssetCheckEvaluation]:
    return [
        dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey("rewards"),
            check_name=str(c.check_name),
            passed=bool(c.passed),
            partition=key,
            description=c.description,
            metadata=dict(c.metadata or {}),
            blocking=True,
        )
        for c in result.check_results or []
    ]


@dataclass
class _JudgePool:
    """The ``judge`` pool's slots, claimed in this run's name and handed from trial to trial.

    Dagster's slot table bounds judging across every run; within this run, at most the pool's limit of
    trials ask it at once (``_gate``), and the others wait in this process, each woken the moment a trial's
    judging ends. Without the gate, a run of 1,024 trials had hundreds of threads polling the slot table
    (each claim a transaction over the pool's pending steps) while sixteen judged: judging took 230 s.
    The limit is read when the run first judges (it sizes the gate; a limit set or raised later is used by later
    runs): read for every trial, it was two queries each, hundreds at once in a run's first judgments. A trial
    still waiting for a slot reads it again, so a limit removed frees the waiters.

    A claimed slot is a *lane* (its step key ``judge lane N``): a trial whose judging ends hands its lane to a
    trial of this run waiting at the gate, unless a step of another run waits for the pool in Dagster's table
    (it then gets the slot, first come first served, as Dagster assigns freed slots) or the pool's limit fell
    below its claimed slots. Claiming and freeing a slot per trial were thirteen statements on the slot table,
    a tenth of a 256-trial worker's CPU; the check before a hand-over is three reads. :meth:`close` frees the
    lanes left at the run's end; a killed worker's are freed with its run (``free_slots_after_run_end_seconds``).

    The run's log says when trials start waiting at the gate, once for each wave of waiters (the first waiter
    names itself), and how many waited once the wave has all been let through: a line per waiting trial was
    about a thousand lines of the same words (and as many stored events) in a run of 1,024 trials.
    """

    storage: Any
    run_id: str
    _gate: threading.Semaphore | None = field(default=None, init=False)
    _limit_read: bool = field(default=False, init=False)
    _gating: threading.Lock = field(default_factory=threading.Lock, init=False)
    _idle: list[str] = field(default_factory=list, init=False)
    """Lanes this run holds that no trial judges in: each for a trial already counted in ``_waiting``."""
    _waiting: int = field(default=0, init=False)
    _wave: int = field(default=0, init=False)
    """Trials that have waited at the gate since it last had no waiter."""
    _lanes: Iterator[int] = field(default_factory=itertools.count, init=False)

    def _limit(self) -> int | None:
        """The limit to claim against, or None: a pool with no row is given the instance's default limit
        first, and without a default it is unlimited (Dagster's rules for a step's pool)."""
        if not self.storage.supports_global_concurrency_limits:
            return None
        limits = {p.name: p.limit for p in self.storage.get_pool_limits()}
        if pools.JUDGE in limits:
            return limits[pools.JUDGE]
        default = self.storage.get_pool_config().default_pool_limit
        if default is None:
            return None
        try:
            self.storage.initialize_concurrency_limit_to_default(pools.JUDGE)
        except SQLAlchemyError:  # another trial (or process) inserted the row first: it is there
            if pools.JUDGE not in {p.name for p in self.storage.get_pool_limits()}:
                raise
        return default

    def _gate_of(self) -> threading.Semaphore | None:
        """The run's gate, or None when the pool was unlimited as the run first judged."""
        with self._gating:
            if not self._limit_read:
                limit = self._limit()
                self._gate = None if limit is None else threading.Semaphore(max(1, limit))
                self._limit_read = True
            return self._gate

    def _claim(self, blocked: str, log: _QueueLog) -> str:
        """A new lane: a slot of Dagster's table, polled for as Dagster's steps poll while other runs hold them."""
        with self._gating:
            lane = f"judge lane {next(self._lanes)}"
        wait = POOL_POLL_S
        status = self.storage.claim_concurrency_slot(pools.JUDGE, self.run_id, lane)
        if not status.is_claimed and blocked:
            log.info(blocked)
        try:
            while not status.is_claimed and self._limit() is not None:  # a limit removed frees the waiters
                time.sleep(wait)
                wait = min(POOL_POLL_MAX_S, wait * 2)
                status = self.storage.claim_concurrency_slot(pools.JUDGE, self.run_id, lane)
        except BaseException:
            self.storage.free_concurrency_slot_for_step(self.run_id, lane)
            raise
        return lane

    def _keep_for_a_waiter(self) -> bool:
        """Whether an ending trial's lane goes to a trial of this run waiting at the gate (one not yet given one)."""
        with self._gating:
            if self._waiting <= len(self._idle):
                return False
        info = self.storage.get_concurrency_info(pools.JUDGE)
        others = any(p.run_id != self.run_id and p.assigned_timestamp is None for p in info.pending_steps)
        return not others and (info.limit is None or len(info.claimed_slots) <= info.limit)

    def _hand_back(self, lane: str) -> None:
        try:
            keep = self._keep_for_a_waiter()
        except SQLAlchemyError:  # the check is an optimisation: a trial that judged is not failed for it
            keep = False
        if keep:
            with self._gating:
                self._idle.append(lane)
        else:
            self.storage.free_concurrency_slot_for_step(self.run_id, lane)

    @contextmanager
    def slot(self, key: str, log: _QueueLog) -> Iterator[None]:
        gate = self._gate_of()
        if gate is None:
            yield
            return
        blocked = f"judging {key} blocked by limit for pool {pools.JUDGE}; waiting for a slot"
        if not gate.acquire(blocking=False):
            with self._gating:
                first, self._waiting, self._wave = self._waiting == 0, self._waiting + 1, self._wave + 1
            if first:
                log.info(f"{blocked}, with the trials of this run that reach the limit while it waits")
            gate.acquire()
            with self._gating:
                self._waiting -= 1
                waited, self._wave = (self._wave, 0) if self._waiting == 0 else (0, self._wave)
            if waited:
                log.info(f"judging: {waited} trial(s) of this run waited for a slot of pool {pools.JUDGE}")
            blocked = ""
        try:
            with self._gating:
                lane = self._idle.pop() if self._idle else None
            lane = lane or self._claim(blocked, log)
            try:
                yield
            finally:
                self._hand_back(lane)
        finally:
            gate.release()

    def close(self) -> None:
        """Free the lanes no trial took (the run's trials have all ended)."""
        with self._gating:
            idle, self._idle = self._idle, []
        for lane in idle:
            self.storage.free_concurrency_slot_for_step(self.run_id, lane)


def _run_trial(
    key: str,
    config: RolloutBatchConfig,
    state: Stores,
    world_store: WorldStoreResource,
    judge: JudgeResource,
    judging: _JudgePool,
    log: _QueueLog,
    tags,
) -> _Ended:
    """One trial, as ``trial_job`` (or ``judge_job``) runs it: rollout with its retries, then judging with its."""
    ended = _Ended(key)
    try:
        if not config.judge_only:
            rolled = _attempts(lambda unit: trajectory_of(unit, state, world_store), key, log, tags)
            ended.events.append(_materialization("trajectories", key, rolled))
        if config.rollout_only:
            return ended
        experiment = parse_trial_partition(key)[0]
        # Without a judge the reward is the verifier's, already in the trajectory: nothing the pool bounds is
        # called, so the trial neither waits for a slot nor claims one (two transactions on the slot table).
        slot = judging.slot(key, log) if state.experiments.get(experiment).judge != "none" else contextlib.nullcontext()
        with slot:
            judged = _attempts(lambda unit: reward_of_trial(unit, state, judge), key, log, tags)
    except dg.Failure as err:
        ended.error = err.description or str(err)
        return ended
    except Exception as err:  # a trial's unexpected error is that trial's: the others go on
        ended.error = f"{type(err).__name__}: {err}"
        return ended
    evaluations = _evaluations(key, judged)
    broken = [e for e in evaluations if not e.passed]
    if broken:
        experiment, step, slot = parse_trial_partition(key)
        trial_id = state.experiments.get(experiment).trial(step, slot).trial_id
        detail = "; ".join(f"{e.check_name}: {e.description}" for e in broken)
        state.attempts.record_trial_failure(experiment, trial_id, "check", f"a blocking check failed: {detail}")
        log.warning(f"{trial_id}: a blocking check failed ({detail}); failed for good, its step trains without it")
    else:
        ended.events.append(_materialization("rewards", key, judged))
    ended.events += evaluations  # after the materialization they evaluate, as an asset's own step records them
    return ended


@dg.op(
    name=OP_NAME,
    pool=pools.ROLLOUT,
    out=dg.Out(dg.Nothing, description="Nothing to store: the trials' records are in the home's stores."),
    description="A step's trials in one worker, each in a thread with its own sandbox, records and retries.",
)
def roll_out_trials(
    context: dg.OpExecutionContext,
    config: RolloutBatchConfig,
    stores: StoresResource,
    world_store: WorldStoreResource,
    judge: JudgeResource,
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation | dg.Output]:
    if context.job_name == ROLLOUT_PODS_JOB and not config.rollout_only:
        raise dg.Failure(f"{ROLLOUT_PODS_JOB} only rolls out (its worker has no judge key): set rollout_only")
    state = stores.stores.pinned()  # the experiment's records read once for all the run's trials
    tags = dict(context.run.tags)
    out: queue.Queue = queue.Queue()
    log = _QueueLog(out)
    judging = _JudgePool(context.instance.event_log_storage, context.run_id)
    provenance = _Provenance(context.instance)

    def work(key: str) -> None:
        try:
            ended = _run_trial(key, config, state, world_store, judge, judging, log, tags)
        except BaseException as err:  # never leave the op waiting for a trial that cannot end
            ended = _Ended(key, error=f"{type(err).__name__}: {err}")
        out.put(("ended", ended))

    # Daemon threads: a canceled run's worker exits without waiting for them; each sandbox dies with its thread.
    for key in config.trials:
        threading.Thread(target=work, args=(key,), name=f"trial {key}", daemon=True).start()
    context.log.info(f"{len(config.trials)} trials in flight in this worker")
    failed: list[str] = []
    ok = 0
    goal, one, ended_with = (
        ("trajectories", "trajectory", "rolled_out") if config.rollout_only else ("rewards", "reward", "rewarded")
    )
    remaining = len(config.trials)
    try:
        while remaining:
            drained = [out.get()]
            with contextlib.suppress(queue.Empty):
                while True:  # every trial that ended meanwhile: their events are logged as one batch
                    drained.append(out.get_nowait())
            ended: list[_Ended] = []
            for kind, item in drained:
                if kind == "info":
                    context.log.info(item)
                elif kind == "warning":
                    context.log.warning(item)
                else:
                    ended.append(item)
            remaining -= len(ended)
            yield from provenance.recorded(ended)
            for item in ended:
                if item.error is not None:
                    failed.append(f"{item.key}: {item.error.splitlines()[0] if item.error else ''}")
                elif any(_of(e, goal) for e in item.events):
                    ok += 1
    finally:
        judging.close()  # the lanes no trial took
    if failed:
        raise dg.Failure(
            f"{len(failed)} of {len(config.trials)} trials did not end with a {one}; "
            f"the driver retries or gives up on each: {'; '.join(failed[:5])}",
            metadata={"trials": len(config.trials), ended_with: ok, "failed": len(failed)},
            allow_retries=False,
        )
    yield dg.Output(None, metadata={"trials": len(config.trials), ended_with: ok})
