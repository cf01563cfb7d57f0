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
from dataclasses import dataclass, field
from typing import Literal

import dagster as dg
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunRecord, RunsFilter

from rl_assets.assets.partitions import trial_partition_key
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.resources.stores import Stores
from rl_assets.tags import EXPERIMENT_TAG, PARTITION_TAG, RUBRIC_TAG

ACTIVE_STATUSES = {
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
}


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
    launches: list[Launch] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return len(self.steps) == self.config.steps and all(s.complete for s in self.steps)

    @property
    def steps_trained(self) -> int:
        return sum(1 for s in self.steps if s.trained)


def _partition_tags(partition_key: str, dims: dict[str, str] | None = None) -> dict[str, str]:
    tags = {"dagster/partition": partition_key, PARTITION_TAG: partition_key}
    for dim, value in (dims or {}).items():
        tags[f"dagster/partition/{dim}"] = value
    return tags


def _failures_since_success(runs: list[DagsterRun]) -> int:
    """Failed or canceled runs newer than the unit's last successful one (``runs`` newest first, as stored).

    A unit repaired after a damaged record runs again though none of its runs failed; counting all its
    runs would give it up as crashing after its second repair.
    """
    failures = 0
    for run in runs:
        if run.status == DagsterRunStatus.SUCCESS:
            break
        if run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
            failures += 1
    return failures


def plan(instance: DagsterInstance, stores: Stores, config: ExperimentConfig, rubric: str | None = None) -> Plan:
    """The experiment's status under ``rubric`` (default: its own) and the runs to launch next.

    Under its own rubric an experiment is generated, judged and trained. Under
    another rubric it is *re-scored*: its stored trajectories are judged again
    and a second weights chain is trained from them, in step order; nothing is
    generated, and the first chain's records stay as they are.
    """
    scoring = config.scored_with(rubric or config.rubric)
    rescoring = scoring.rubric != config.rubric
    records = instance.get_run_records(filters=RunsFilter(tags={EXPERIMENT_TAG: config.name}))
    by_unit: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for record in records:
        run = record.dagster_run
        by_unit[(run.tags.get(PARTITION_TAG, ""), run.tags.get(RUBRIC_TAG, config.rubric))].append(record)

    def run_counts(key: str) -> tuple[bool, int, int]:
        """(a run in flight, runs so far, runs failed since the last success) of one unit."""
        rs = by_unit.get((key, scoring.rubric), [])
        return in_flight(rs), len(rs), _failures_since_success([r.dagster_run for r in rs])

    def refused(key: str) -> bool:
        """The unit's newest run failed: a blocking asset check failed after the materialization was recorded
        (or the worker died after it). Its materialization does not count until a run of the unit succeeds."""
        rs = by_unit.get((key, scoring.rubric), [])
        return bool(rs) and rs[0].dagster_run.status == DagsterRunStatus.FAILURE

    base_tags = {EXPERIMENT_TAG: config.name, RUBRIC_TAG: scoring.rubric}
    launches: list[Launch] = []
    if not rescoring:
        built = instance.get_materialized_partitions(dg.AssetKey("worlds")) - stores.damage.open_keys("world")
        worlds_missing = [w for w in config.world_ids if w not in built or refused(w)]
        for world_id in worlds_missing:
            active, count, failures = run_counts(world_id)
            if not active:
                tags = {**base_tags, **_partition_tags(world_id)}
                launches.append(Launch("world_job", world_id, tags, count, failures))
        if worlds_missing:
            return Plan(scoring, worlds_missing, [], launches)

    damaged_trials = stores.damage.open_keys("trial")
    if rescoring:
        rewarded = {
            str(trial_partition_key(config, s, slot))
            for s in range(config.steps)
            for slot in config.trial_slots()
            if stores.trials.has_reward(config.name, scoring.rubric, s, slot)
        } - damaged_trials
        trained_keys = {config.step_key(s) for s in range(config.steps)}
    else:
        rewarded = instance.get_materialized_partitions(dg.AssetKey("rewards")) - damaged_trials
        trained_keys = instance.get_materialized_partitions(dg.AssetKey("weights"))
    trained_keys -= stores.damage.open_keys("step")
    unit_job = "judge_job" if rescoring else "trial_job"
    failed = stores.attempts.failed_trials(config.name)
    steps: list[StepStatus] = []
    for s in range(config.steps):
        step_key = config.step_key(s)
        trials = []
        for spec in config.trials(s):
            slot = spec.trial_id.split("-", 1)[1]
            key = str(trial_partition_key(config, s, slot))
            active, count, failures = run_counts(key)
            state: TrialState
            if key in rewarded and not refused(key):
                state = "ok"
            elif spec.trial_id in failed:
                state = "failed"
            elif active:
                state = "running"
            else:
                state = "pending"
                tags = {**base_tags, **_partition_tags(key, {"step": step_key, "trial": slot})}
                launches.append(Launch(unit_job, key, tags, count, failures))
            trials.append(TrialStatus(spec.trial_id, key, state, count, failures))
        ledgered = stores.training.get(config.name, scoring.rubric, s) is not None
        trained = ledgered and step_key in trained_keys and not refused(step_key)
        train_active, train_count, train_failures = run_counts(step_key)
        all_terminal = all(t.state in ("ok", "failed") for t in trials)
        chain_ready = not steps or steps[-1].trained
        if all_terminal and chain_ready and not trained and not train_active:
            tags = {**base_tags, **_partition_tags(step_key)}
            launches.append(Launch("train_job", step_key, tags, train_count, train_failures))
        steps.append(StepStatus(s, step_key, trials, trained, train_active))
        if not trained and not rescoring:
            break  # the next step's rollouts need this step's policy
    return Plan(scoring, [], steps, launches)


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


def give_up_on_crashing(stores: Stores, p: Plan) -> Triage:
    """Record as failed for good the trials whose last :data:`MAX_FAILED_RUNS` runs failed; launch the rest.

    The driver sensor applies this rule on every tick; a following command reads the same
    :func:`stuck_units` to stop with the reason.
    """
    failed = [t for s in p.steps for t in s.trials if t.state == "pending" and t.failures >= MAX_FAILED_RUNS]
    for trial in failed:
        stores.attempts.record_trial_failure(
            p.config.name, trial.trial_id, "run", f"its runs died {trial.failures} times"
        )
    given_up = {t.partition_key for t in failed}
    stuck = stuck_units(p)
    launches = [
        launch
        for launch in p.launches
        if launch not in stuck and not (launch.job in UNIT_JOBS and launch.partition_key in given_up)
    ]
    return Triage(launches, failed, stuck)
