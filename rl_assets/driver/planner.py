"""What an experiment still needs, computed from durable state only.

A trial is ``ok`` when its reward is materialized (and its newest run did not
fail: a blocking asset check fails the run after the materialization is
recorded, and stops what depends on it), ``failed`` when it failed
for good (recorded by the asset that gave up), ``running`` while one of its
runs is in flight, else ``pending``. A step opens when the previous one is
trained (ledger row and weights materialization); it trains when all of its
trials are ``ok`` or ``failed``. Worlds are built before anything else. A unit
with open damage (see :mod:`rl_assets.stores.damage`) is not done, whatever
Dagster recorded, so it is launched again.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import dagster as dg
from dagster import DagsterInstance, DagsterRunStatus, RunRecord, RunsFilter

from rl_assets.assets.partitions import trial_partition_key
from rl_assets.assets.rollout_batches import batch_members
from rl_assets.domain.experiment import ExperimentConfig, parse_step_key
from rl_assets.domain.run_tags import EXPERIMENT_TAG, PARTITION_TAG, ROLLOUT_STEP_TAG, RUBRIC_TAG
from rl_assets.stores.home_stores import Stores

ACTIVE_STATUSES = {
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
}


def last_change(instance: DagsterInstance, stores: Stores) -> tuple[Any, ...]:
    """What moves when a run changes status or a drive or re-scoring is requested: what a waiting sensor tick
    and a following command watch between plans, an indexed read of the runs in flight (a run created, started or
    ended changes the set) and of the open drive requests, where a plan reads the experiment's every run and
    partition."""
    active = instance.get_run_records(filters=RunsFilter(statuses=list(ACTIVE_STATUSES)))
    runs = frozenset((r.dagster_run.run_id, r.dagster_run.status) for r in active)
    return (runs, *stores.drives.generation())


WILL_RETRY_TAG = "dagster/will_retry"
PARENT_RUN_TAG = "dagster/parent_run_id"
RETRY_GRACE_S = 30.0
"""How long a failed run that Dagster says it will retry stands in flight for its retry.

Dagster's retry daemon creates the retry within seconds, but it can miss one: it reads failures from the
event log, and a run whose failure event it reads before the run's status is updated is never retried.
Past this grace the driver launches the unit itself.
"""


def in_flight(records: list[RunRecord], now: float | None = None) -> bool:
    """A unit has a run in flight: one active, or a failed one that Dagster's run retries will launch again.

    A run whose worker died is failed by run monitoring and retried by the daemon (``run_retries``); until
    the retry exists (or :data:`RETRY_GRACE_S` has passed) the failed run stands for it, or the driver would
    launch the unit a second time.
    """
    now = time.time() if now is None else now
    retried = {r.dagster_run.tags[PARENT_RUN_TAG] for r in records if PARENT_RUN_TAG in r.dagster_run.tags}

    def awaiting_retry(record: RunRecord) -> bool:
        run = record.dagster_run
        return (
            run.status == DagsterRunStatus.FAILURE
            and run.tags.get(WILL_RETRY_TAG) == "true"
            and run.run_id not in retried
            and now - record.update_timestamp.timestamp() < RETRY_GRACE_S
        )

    return any(r.dagster_run.status in ACTIVE_STATUSES or awaiting_retry(r) for r in records)


TrialState = Literal["ok", "failed", "running", "pending"]
UNIT_JOBS = ("trial_job", "judge_job")
"""Jobs of one trial: a trial given up on fails for good and its step trains without it."""
MAX_FAILED_RUNS = 3
"""Runs of a unit that may fail in a row (since its last success) before a driver gives up on it."""


@dataclass(frozen=True)
class Launch:
    """A run to start: a job on one partition, with a run key unique per generation."""

    job: str
    partition_key: str
    tags: dict[str, str]
    generation: int
    """Runs of the unit so far, of any outcome: numbers the run key, so each launch's key is new."""
    failures: int = 0
    """Runs of the unit that failed since its last success: what the driver gives up on."""

    @property
    def run_key(self) -> str:
        return f"{self.job}:{self.partition_key}:{self.generation}"


@dataclass(frozen=True)
class TrialStatus:
    trial_id: str
    partition_key: str
    state: TrialState
    runs: int
    failures: int
    """Runs that failed since the trial's last successful run (a repaired trial starts again at 0)."""
    last_failed_run: str | None = None
    """The newest of those runs, whose error a trial given up on is recorded with."""


@dataclass(frozen=True)
class StepStatus:
    step: int
    key: str
    trials: list[TrialStatus]
    trained: bool
    train_running: bool

    def count(self, state: TrialState) -> int:
        return sum(1 for t in self.trials if t.state == state)

    @property
    def complete(self) -> bool:
        """Trained, and every trial settled: a repaired trial reopens a trained step."""
        return self.trained and all(t.state in ("ok", "failed") for t in self.trials)


@dataclass(frozen=True)
class Plan:
    config: ExperimentConfig
    worlds_missing: list[str]
    steps: list[StepStatus]
    """The open steps, in order: the training frontier, the step before it, damaged ones, a re-scoring's untrained."""
    launches: list[Launch] = field(default_factory=list)
    settled: int = 0
    """Steps before the last open one that are trained with every trial settled: counted, not listed."""

    @property
    def done(self) -> bool:
        reached = self.settled + len(self.steps) == self.config.steps
        return reached and all(s.complete for s in self.steps)

    @property
    def steps_trained(self) -> int:
        return self.settled + sum(1 for s in self.steps if s.trained)

    def describe(self) -> str:
        """One line: what the experiment is doing now (what ``train`` shows, and the driver notes for ``status``)."""
        name, steps, rubric = self.config.name, self.config.steps, self.config.rubric
        if self.worlds_missing:
            return f"{name}: building worlds ({len(self.worlds_missing)} left)"
        if not self.steps:
            return f"{name}: starting"
        if self.done:
            return f"{name}: {steps}/{steps} steps trained (rubric {rubric})"
        s = next(s for s in self.steps if not s.complete)
        phase = "training" if s.train_running else ("repairing" if s.trained else "rolling out")
        return (
            f"{name} ({rubric}): step {s.step} ({s.step + 1} of {steps}) {phase}: "
            f"{s.count('ok')} ok, {s.count('failed')} failed, "
            f"{s.count('running')} running, {s.count('pending')} pending of {len(s.trials)} trials"
        )


def _partition_tags(partition_key: str, dims: dict[str, str] | None = None) -> dict[str, str]:
    tags = {"dagster/partition": partition_key, PARTITION_TAG: partition_key}
    for dim, value in (dims or {}).items():
        tags[f"dagster/partition/{dim}"] = value
    return tags


def _failures_since_success(records: list[RunRecord], since: datetime | None = None) -> int:
    """Failed or canceled runs newer than the unit's last successful one (newest first, as stored), and created
    after ``since`` if given.

    A unit repaired after a damaged record runs again though none of its runs failed; counting all its
    runs would give it up as crashing after its second repair.
    """
    failures = 0
    for record in records:
        run = record.dagster_run
        if run.status == DagsterRunStatus.SUCCESS or (since is not None and record.create_timestamp < since):
            break
        if run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
            failures += 1
    return failures


class UnitRuns:
    """The runs of the units a plan looks at, newest first, by unit (``rl/partition``).

    A plan reads only what can still change: the runs of the open steps (and of worlds not yet built),
    never the experiment's whole history, so a tick costs the same at a million runs as at ten. A rollout
    run (``rollout_job``) is a run of each trial it carries: in flight while it is, and failed for each
    trial it ended without rewarding (a worker SIGKILLed mid-step). It never refuses a trial's
    materialization: it fails only after every trial in it ended, and a trial that broke a blocking check
    in it is failed for good there.
    """

    def __init__(self, instance: DagsterInstance, config: ExperimentConfig, rubric: str) -> None:
        self.instance = instance
        self.config = config
        self.rubric = rubric
        self.by_unit: dict[str, list[RunRecord]] = defaultdict(list)
        self.batched: set[str] = set()
        """Run ids of the rollout runs loaded."""

    def _ours(self, record: RunRecord) -> bool:
        tags = record.dagster_run.tags
        return tags.get(EXPERIMENT_TAG) == self.config.name and tags.get(RUBRIC_TAG, self.config.rubric) == self.rubric

    def load(self, filters: RunsFilter) -> None:
        for record in self.instance.get_run_records(filters=filters):
            if self._ours(record):
                self.by_unit[record.dagster_run.tags.get(PARTITION_TAG, "")].append(record)

    def load_batches(self, step_keys: list[str]) -> None:
        """The rollout runs of these steps (one indexed lookup), as runs of each trial they carry; every unit's
        runs are kept newest first."""
        if not step_keys:
            return
        for record in self.instance.get_run_records(filters=RunsFilter(tags={ROLLOUT_STEP_TAG: step_keys})):
            if self._ours(record):
                self.batched.add(record.dagster_run.run_id)
                for key in batch_members(record.dagster_run.run_config):
                    self.by_unit[key].append(record)
        for records in self.by_unit.values():
            records.sort(key=lambda r: r.create_timestamp, reverse=True)

    def load_units(self, keys: list[str]) -> None:
        """The runs of these units (trial and step partition keys), found by the tag that names a unit: one
        indexed lookup, whatever the history. A re-scoring's runs are found by their rubric too (they carry
        it; the first chain's runs of the same units are not the re-scoring's)."""
        if keys:
            tags: dict[str, str | list[str]] = {PARTITION_TAG: keys}
            if self.rubric != self.config.rubric:
                tags[RUBRIC_TAG] = self.rubric
            self.load(RunsFilter(tags=tags))

    def counts(self, key: str, since: datetime | None = None) -> tuple[bool, int, int]:
        """(a run in flight, runs so far, runs failed since the last success, and since ``since``) of one unit."""
        rs = self.by_unit.get(key, [])
        return in_flight(rs), len(rs), _failures_since_success(rs, since)

    def newest_failed(self, key: str) -> str | None:
        """The run id of the unit's newest failed or canceled run."""
        failed = (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
        return next((r.dagster_run.run_id for r in self.by_unit.get(key, []) if r.dagster_run.status in failed), None)

    def refused(self, key: str) -> bool:
        """The unit's newest run failed: a blocking asset check failed after the materialization was recorded
        (or the worker died after it). Its materialization does not count until a run of the unit succeeds."""
        rs = self.by_unit.get(key, [])
        return (
            bool(rs)
            and rs[0].dagster_run.run_id not in self.batched
            and rs[0].dagster_run.status == DagsterRunStatus.FAILURE
        )


def _trial_key(config: ExperimentConfig, trial_id: str) -> str:
    """``s3-p1-n0`` -> its partition key, ``exp/s3|p1-n0``."""
    step, slot = trial_id.split("-", 1)
    return str(trial_partition_key(config, int(step[1:]), slot))


def materialized_partitions(instance: DagsterInstance, asset: str, keys: set[str]) -> set[str]:
    """Which of ``keys`` the asset has a materialization for: one query over those partitions only."""
    if not keys:  # Dagster reads every partition when given none
        return set()
    found = instance.get_latest_storage_id_by_partition(
        dg.AssetKey(asset), dg.DagsterEventType.ASSET_MATERIALIZATION, partitions=keys
    )
    return set(found)


RESCORING_WINDOW = 8
"""Steps a re-scoring judges ahead of its training frontier: enough judgments to keep the trials in flight busy
(a step is many trials), few enough that a tick of a long experiment's re-scoring reads a window, not the rest."""


def _open_steps(
    stores: Stores, config: ExperimentConfig, rubric: str, rescoring: bool, damaged: set[str]
) -> tuple[list[int], int]:
    """(the steps a plan looks at, the training frontier).

    Steps are trained in order, so the ledger's frontier ``F`` says that steps ``0..F-1`` were trained with
    every trial settled when the next one opened. A plan looks at the last of them (its weights may not be
    materialized yet), the frontier, every step with open damage, and in a re-scoring the
    :data:`RESCORING_WINDOW` steps from the frontier on (their judgments run together, ahead of training);
    the others are settled, or not reached yet, and only counted. ``damaged``: the open
    damage keys of trials and steps.
    """
    frontier = stores.training.frontier(config.name, rubric)
    steps = {s for s in (frontier - 1, frontier) if 0 <= s < config.steps}
    if rescoring:
        steps.update(range(frontier, min(config.steps, frontier + RESCORING_WINDOW)))
    for key in damaged:
        experiment, step = parse_step_key(key.split("|")[0])
        if experiment == config.name and 0 <= step < config.steps:
            steps.add(step)
    return sorted(steps), frontier


def plan(instance: DagsterInstance, stores: Stores, config: ExperimentConfig, rubric: str | None = None) -> Plan:
    """The experiment's status under ``rubric`` (default: its own) and the runs to launch next.

    Under its own rubric an experiment is generated, judged and trained. Under
    another rubric it is *re-scored*: its stored trajectories are judged again
    and a second weights chain is trained from them, in step order; nothing is
    generated, and the first chain's records stay as they are.
    """
    scoring = config.scored_with(rubric or config.rubric)
    rescoring = scoring.rubric != config.rubric
    damaged_trials, damaged_steps = stores.damage.open_keys("trial"), stores.damage.open_keys("step")
    open_steps, frontier = _open_steps(stores, config, scoring.rubric, rescoring, damaged_trials | damaged_steps)
    runs = UnitRuns(instance, config, scoring.rubric)
    # Worlds and training steps are given up on for their failures since the experiment was last asked for:
    # asking again (the same command, once the cause is fixed) gives them another try.
    asked = stores.drives.requested_at(config.name)
    base_tags = {EXPERIMENT_TAG: config.name, RUBRIC_TAG: scoring.rubric}
    launches: list[Launch] = []
    if not rescoring:
        # Until a step is trained the worlds are checked; after, only a damaged one is built again.
        damaged_worlds = stores.damage.open_keys("world")
        to_check = set(config.world_ids) if frontier == 0 else damaged_worlds & set(config.world_ids)
        if to_check:
            runs.load(RunsFilter(job_name="world_job", tags={EXPERIMENT_TAG: config.name}))
            built = materialized_partitions(instance, "worlds", to_check) - damaged_worlds
            worlds_missing = [w for w in config.world_ids if w in to_check and (w not in built or runs.refused(w))]
            for world_id in worlds_missing:
                active, count, failures = runs.counts(world_id, asked)
                if not active:
                    tags = {**base_tags, **_partition_tags(world_id)}
                    launches.append(Launch("world_job", world_id, tags, count, failures))
            if worlds_missing:
                return Plan(scoring, worlds_missing, [], launches)

    trial_keys = {s: {t: _trial_key(config, t) for t in config.trial_ids(s)} for s in open_steps}
    runs.load_units([key for s in open_steps for key in (config.step_key(s), *trial_keys[s].values())])
    runs.load_batches([config.step_key(s) for s in open_steps])
    if rescoring:
        rewarded = {
            key
            for s, keys in trial_keys.items()
            for trial_id, key in keys.items()
            if stores.trials.has_reward(config.name, scoring.rubric, s, trial_id.split("-", 1)[1])
        }
        trained_keys = {config.step_key(s) for s in open_steps}
    else:
        rewarded = materialized_partitions(
            instance, "rewards", {k for keys in trial_keys.values() for k in keys.values()}
        )
        trained_keys = materialized_partitions(instance, "weights", {config.step_key(s) for s in open_steps})
    rewarded -= damaged_trials
    trained_keys -= damaged_steps
    unit_job = "judge_job" if rescoring else "trial_job"
    failed = stores.attempts.failed_trials(config.name, open_steps)
    steps: list[StepStatus] = []
    settled = 0
    for s in open_steps:
        settled += s - (steps[-1].step + 1 if steps else 0)  # the trained steps between the open ones
        step_key = config.step_key(s)
        trials = []
        for trial_id, key in trial_keys[s].items():
            active, count, failures = runs.counts(key)
            state: TrialState
            if key in rewarded and not runs.refused(key):
                state = "ok"
            elif trial_id in failed:
                state = "failed"
            elif active:
                state = "running"
            else:
                state = "pending"
                slot = trial_id.split("-", 1)[1]
                tags = {**base_tags, **_partition_tags(key, {"step": step_key, "trial": slot})}
                launches.append(Launch(unit_job, key, tags, count, failures))
            trials.append(
                TrialStatus(trial_id, key, state, count, failures, runs.newest_failed(key) if failures else None)
            )
        trained = s < frontier and step_key in trained_keys and not runs.refused(step_key)
        train_active, train_count, train_failures = runs.counts(step_key, asked)
        all_terminal = all(t.state in ("ok", "failed") for t in trials)
        chain_ready = s == 0 or (steps[-1].trained if steps and steps[-1].step == s - 1 else s - 1 < frontier)
        if all_terminal and chain_ready and not trained and not train_active:
            tags = {**base_tags, **_partition_tags(step_key)}
            launches.append(Launch("train_job", step_key, tags, train_count, train_failures))
        steps.append(StepStatus(s, step_key, trials, trained, train_active))
        if not trained and not rescoring:
            break  # the next step's rollouts need this step's policy
    return Plan(scoring, [], steps, launches, settled)


@dataclass(frozen=True)
class Triage:
    """A plan's launches once the units whose runs keep failing are taken out."""

    launches: list[Launch]
    """What to launch."""
    failed_trials: list[TrialStatus]
    """Trials given up on: recorded as failed for good, so their steps train without them."""
    stuck: list[Launch]
    """Worlds and training steps given up on: nothing can go on without them, so a person must look."""


def stuck_units(p: Plan) -> list[Launch]:
    """Worlds and training steps whose last :data:`MAX_FAILED_RUNS` runs failed: given up on, for a person."""
    return [launch for launch in p.launches if launch.job not in UNIT_JOBS and launch.failures >= MAX_FAILED_RUNS]


def give_up_on_crashing(stores: Stores, p: Plan, explain: Callable[[str], str | None] = lambda run_id: None) -> Triage:
    """Record as failed for good the trials whose last :data:`MAX_FAILED_RUNS` runs failed; launch the rest.

    A trial's failure says why its newest run failed (``explain``: a run's error, e.g.
    :func:`~rl_assets.driver.failure_watch.run_error`), so ``train``, ``status`` and ``report`` show the cause,
    not only the count. The driver sensor applies this rule on every tick; a following command reads the same
    :func:`stuck_units` to stop with the reason.
    """
    failed = [t for s in p.steps for t in s.trials if t.state == "pending" and t.failures >= MAX_FAILED_RUNS]
    for trial in failed:
        why = explain(trial.last_failed_run) if trial.last_failed_run else None
        stores.attempts.record_trial_failure(
            p.config.name,
            trial.trial_id,
            "run",
            f"its runs failed {trial.failures} times, the last with: {why}"
            if why
            else f"its runs died {trial.failures} times",
        )
    given_up = {t.partition_key for t in failed}
    stuck = stuck_units(p)
    launches = [
        launch
        for launch in p.launches
        if launch not in stuck and not (launch.job in UNIT_JOBS and launch.partition_key in given_up)
    ]
    return Triage(launches, failed, stuck)
