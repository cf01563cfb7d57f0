"""The driver: the daemon's sensors are the only thing that launches an experiment's runs.

Two sensors share the driving, each planning every open drive request
(:mod:`rl_assets.stores.drives`): the experiment, then its requested
re-scorings. ``driver_sensor`` requests the rollouts (worlds, trials, and the
judgments of a re-scoring) and adds the dynamic partitions they need, in the
same tick; ``training_sensor`` requests the training steps. Their run keys are
deterministic (experiment, job, partition, generation, rubric), so a second
tick, or a second daemon, never launches the same unit twice. The rollout
lane caps each experiment's trials in flight at ``max_concurrent_trials``,
launches a step's trials together as rollout runs of up to ``trials_per_run``
trials each (:mod:`rl_assets.assets.rollout_batches`; on Kubernetes a batch's
rollouts and its judging are runs of their own, see :func:`_halves`), and
gives up on units whose runs keep failing
(:func:`~rl_assets.driver.planner.give_up_on_crashing`); the training lane
restarts the home's Ray head before a training run if it died.

Dagster evaluates a sensor at most every 5 seconds (its daemon's loop has that
floor), far slower than a trial. So a tick that finds nothing to launch waits
inside the tick, up to ``LONG_POLL_S``, for a run to change status or a new
request, and plans again at once; and the two lanes tick in threads of their
own (``sensors: use_threads`` in ``dagster.yaml``), so the end of a step's
rollouts starts its training, and the end of its training the next step's
rollouts, each within a poll, not at the next 5-second turn of one sensor.
``train``, ``rescore`` and ``fork`` record a request and follow the plan from
the command line; they launch nothing.

``rubric_sensor`` (off by default; turn it on in the UI's sensor list or with
``dagster sensor start rubric_sensor``) watches the rubric registry; when a
new rubric appears it requests the re-scoring of the finished experiments
named in ``RL_ASSETS_RESCORE_EXPERIMENTS`` (comma-separated, ``*`` for all);
the driver's sensors launch the runs. (``rubric_observer``, on by default,
records the registry's versions: the observations are its alone, one per
change.) Its
cursor holds the rubrics already seen, and requests are idempotent, so a
rubric triggers one re-scoring however often the sensor ticks.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import dagster as dg
from dagster import DagsterInstance
from sqlalchemy.exc import SQLAlchemyError

from rl_assets.application import experiments
from rl_assets.application.experiments import Refused
from rl_assets.assets.partitions import STEP, TRIAL_SLOT, WORLD, parse_trial_partition
from rl_assets.assets.pools import POOLS
from rl_assets.assets.rollout_batches import ROLLOUT_PODS_JOB, batch_run_config
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.hashing import content_hash
from rl_assets.domain.run_tags import EXPERIMENT_TAG, ROLLOUT_STEP_TAG, RUBRIC_TAG
from rl_assets.domain.waiting import Waiting
from rl_assets.driver.deployment import batch_tags, current, launch_tags, rescore_experiments
from rl_assets.driver.failure_watch import run_error
from rl_assets.driver.jobs import judge_job, rollout_job, rollout_pods_job, train_job, trial_job, world_job
from rl_assets.driver.planner import (
    UNIT_JOBS,
    Launch,
    Plan,
    give_up_on_crashing,
    last_change,
    materialized_partitions,
    plan,
)
from rl_assets.driver.tick_instance import tick_instance
from rl_assets.home.layout import Home
from rl_assets.home.services.ray_head import LocalRayHead
from rl_assets.home.settings import RESCORE_EXPERIMENTS_ENV, settings
from rl_assets.resources.stores import StoresResource
from rl_assets.stores.home_stores import Stores
from rl_assets.stores.quarantine import read_or_quarantine

STEP_DIMENSION_TAG = "dagster/partition/step"

LONG_POLL_S = 4.0
"""How long a tick with nothing to launch waits for a change before it ends: short of the daemon's 5-second turn,
with room for a plan on a loaded machine, since a tick still running at a turn skips that turn."""
POLL_S = 0.1
_attempts: dict[str, int] = {}
"""The driver attempt of each experiment in this daemon's life (recorded once per code server)."""
_attempts_lock = threading.Lock()
"""Both lanes' ticks run at once, in threads of one code server: one of them records the attempt."""
ROLLOUT_JOBS = ("world_job", "trial_job", "judge_job")
TRAINING_JOBS = ("train_job",)


def _driver_attempt(state: Stores, name: str) -> int:
    """This driver life's attempt number for ``name``: each daemon that plans it is one attempt.

    The sensor runs in a code server that the daemon starts, and may start again; the daemon's pid
    (the code server's parent) names the driver's life.
    """
    with _attempts_lock:
        if name not in _attempts:
            _attempts[name] = state.attempts.record_driver_attempt(name, os.getppid())
        return _attempts[name]


def _crash_if_injected(state: Stores, own: Plan) -> None:
    """The ``crash_driver_at_step`` fault: the first driver life SIGKILLs the daemon's whole session."""
    crash_at = state.experiments.runtime(own.config.name).faults.crash_driver_at_step
    if crash_at is not None and _driver_attempt(state, own.config.name) == 1 and own.steps_trained > crash_at:
        os.killpg(os.getsid(0), signal.SIGKILL)


_noted: dict[tuple[str, str], str] = {}
"""The progress line this process last wrote per (experiment, rubric): a note is written when its line changes."""


def _note_progress(state: Stores, p: Plan, observed_at: float) -> None:
    """Keep the plan's line for ``status`` (:mod:`rl_assets.stores.progress`)."""
    key, line = (p.config.name, p.config.rubric), p.describe()
    if _noted.get(key) != line:
        state.progress.note(*key, line, p.done, observed_at)
        _noted[key] = line


def _experiment_plans(instance: DagsterInstance, state: Stores, name: str) -> list[Plan]:
    """The unfinished plans of an experiment: its own, or once that is done, its requested re-scorings."""
    config = state.experiments.get(name)
    observed_at = time.time()
    own = plan(instance, state, config)
    plans = [own]
    if own.done:
        plans += [plan(instance, state, config, rubric) for rubric in state.scorings.requested(name)]
    for p in plans:
        _note_progress(state, p, observed_at)
    unfinished = [p for p in plans if not p.done]
    if unfinished:
        _driver_attempt(state, name)
        _crash_if_injected(state, own)
    return unfinished


def _open_plans(instance: DagsterInstance, state: Stores) -> list[Plan]:
    """The unfinished plans of every open drive request; a request found done is closed."""
    plans = []
    for name, requested_at in state.drives.open().items():
        unfinished = _experiment_plans(instance, state, name)
        if not unfinished:
            state.drives.close(name, requested_at)
        plans += unfinished
    return plans


def _ensure_trainer_cluster(home: Home) -> None:
    """Restart the home's Ray head if it died, on the address run workers were given.

    Only the home's own head is restarted; a remote cluster (KubeRay) is the
    deployment's to keep alive, and a train run against it fails and is retried.
    """
    head = LocalRayHead(home)
    if settings().ray_address == head.address() and not head.is_running():
        head.ensure_running()


def run_requests_of(
    state: Stores,
    plans: list[Plan],
    world_store: Any,
    warn: Callable[[str], None],
    jobs: tuple[str, ...],
    explain: Callable[[str], str | None] = lambda run_id: None,
    rolled_out: Callable[[set[str]], set[str]] = lambda keys: set(),
) -> list[dg.RunRequest]:
    """The plans' launches of ``jobs`` as run requests: less the units given up on, at most the cap of trials in
    flight. Units given up on are warned about by the lane that would launch them; ``explain`` gives a failed
    run's error, recorded with a trial given up on; ``rolled_out`` says which trial partitions have a
    trajectory (on Kubernetes those are judged by a run of their own, see :func:`_halves`)."""
    requests = []
    for p in plans:
        triage = give_up_on_crashing(state, p, explain)
        if "trial_job" in jobs:
            for trial in triage.failed_trials:
                warn(f"{trial.trial_id} of {p.config.name}: its runs failed {trial.failures} times; failed for good")
        for launch in triage.stuck:
            if launch.job in jobs:
                warn(f"{launch.job} {launch.partition_key} failed {launch.failures} times; not launching it again")
        execution = state.experiments.runtime(p.config.name).execution
        room = execution.max_concurrent_trials - sum(s.count("running") for s in p.steps)
        batches: dict[tuple[str, str], list[Launch]] = defaultdict(list)
        for launch in triage.launches:
            if launch.job not in jobs:
                continue
            if launch.job in UNIT_JOBS:
                if room <= 0:
                    continue
                room -= 1
                if execution.trials_per_run > 1:
                    batches[launch.job, launch.tags[STEP_DIMENSION_TAG]].append(launch)
                    continue
            if launch.job == "train_job":
                _ensure_trainer_cluster(Home(state.home))
            # Dagster never launches a run key twice for a sensor; a world's partition is shared by experiments,
            # so the key names the experiment as well as the unit, its generation and the rubric.
            run_key = f"{p.config.name}:{launch.run_key}:{launch.tags[RUBRIC_TAG]}"
            requests.append(
                dg.RunRequest(
                    run_key=run_key,
                    job_name=launch.job,
                    partition_key=launch.partition_key,
                    tags={**launch.tags, **launch_tags(launch.job, launch.partition_key, world_store)},
                )
            )
        for (job, step_key), launches in batches.items():
            for half, members in _halves(job, launches, rolled_out):
                for start in range(0, len(members), execution.trials_per_run):
                    chunk = members[start : start + execution.trials_per_run]
                    requests.append(_rollout_request(p, half, step_key, chunk))
    return requests


Half = Literal["both", "rollout", "judge"]


def _halves(job: str, launches: list[Launch], rolled_out: Callable[[set[str]], set[str]]) -> list[tuple[Half, list]]:
    """What the rollout runs of a step's launches do: a re-scoring's (``judge_job``) judge; a trial's roll out
    and judge in one thread, locally. On Kubernetes a trial's rollout and its judging are runs of their own,
    as a trial run's are step pods of their own: a worker that drives rollout pods holds the cluster's token
    and no judge key, one that judges the key and no token. So a trial whose trajectory exists is judged, and
    one without is rolled out (its judging is the next run's)."""
    if job == "judge_job":
        return [("judge", launches)]
    if current() == "local":
        return [("both", launches)]
    done = rolled_out({launch.partition_key for launch in launches})
    halves: list[tuple[Half, list]] = [
        ("judge", [launch for launch in launches if launch.partition_key in done]),
        ("rollout", [launch for launch in launches if launch.partition_key not in done]),
    ]
    return [(half, members) for half, members in halves if members]


def _rolled_out(instance: DagsterInstance, state: Stores, keys: set[str]) -> set[str]:
    """The trials among ``keys`` with a trajectory to judge: materialized, and its record usable. A trial with
    open damage whose trajectory record the audit quarantined (or that is damaged now) is rolled out again, as
    its trial run would regenerate it; once it has a record again, its judging repairs the trial."""
    done = materialized_partitions(instance, "trajectories", keys)
    for key in done & state.damage.open_keys("trial"):
        experiment, step, slot = parse_trial_partition(key)
        read = partial(state.trials.trajectory, experiment, step, slot)
        if read_or_quarantine(state.artifacts, state.damage, read, "trajectory", "trial", key).record is None:
            done.discard(key)
    return done


def _rollout_request(p: Plan, half: Half, step_key: str, members: list[Launch]) -> dg.RunRequest:
    """One rollout run for these trials (or judgments) of a step.

    Its run key names the trials and each one's generation (its runs so far, rollout runs included), so a
    second tick asks for the same run, and a trial that a killed run left unfinished goes in a new one.
    """
    keys = sorted(m.partition_key for m in members)
    generations = {m.partition_key: m.generation for m in members}
    digest = content_hash([[k, generations[k]] for k in keys])[:16]
    rubric = members[0].tags[RUBRIC_TAG]
    job = ROLLOUT_PODS_JOB if half == "rollout" else "rollout_job"
    return dg.RunRequest(
        run_key=f"{p.config.name}:{job}:{step_key}:{digest}:{rubric}",
        job_name=job,
        run_config=batch_run_config(keys, judge_only=half == "judge", rollout_only=half == "rollout"),
        tags={
            EXPERIMENT_TAG: p.config.name,
            RUBRIC_TAG: rubric,
            ROLLOUT_STEP_TAG: step_key,
            **batch_tags(judge_only=half == "judge"),
        },
    )


_known_partitions: set[tuple[str, str, str]] = set()
"""Dynamic partitions this process has seen exist, by instance home (Dagster never drops one on its own):
each is asked about once, not on every tick."""


def partition_requests_of(instance: DagsterInstance, plans: list[Plan]) -> list[dg.AddDynamicPartitionsRequest]:
    """The dynamic partitions the plans' open work needs that do not exist yet: only new keys are looked up."""
    add: dict[str, set[str]] = {WORLD.name: set(), TRIAL_SLOT.name: set(), STEP.name: set()}
    for p in plans:
        add[WORLD.name].update(p.config.world_ids)
        add[TRIAL_SLOT.name].update(p.config.trial_slots())
        add[STEP.name].update(s.key for s in p.steps)
    requests = []
    for name, keys in add.items():
        unknown = {k for k in keys if (instance.root_directory, name, k) not in _known_partitions}
        present = {k for k in unknown if instance.has_dynamic_partition(name, k)}
        _known_partitions.update((instance.root_directory, name, k) for k in present)
        if missing := sorted(unknown - present):
            requests.append(dg.AddDynamicPartitionsRequest(partitions_def_name=name, partition_keys=missing))
    return requests


_pools_ready: list[bool] = []


def _ensure_pools(instance: DagsterInstance) -> None:
    """Give every pool its row (at the default limit) before any run claims a slot, once per process.

    Dagster creates a pool's row when the first step claims a slot in it; steps of runs launched together
    on a fresh home then race to insert it, and the losers' runs fail on a unique-key violation.
    """
    if _pools_ready:
        return
    storage = instance.event_log_storage
    for pool in sorted(set(POOLS) - storage.get_concurrency_keys()):
        # Only a missing row: on Postgres, Dagster's insert-else-update aborts its own transaction when the row
        # exists (a new code server on an old home), and another process may insert it first (then it is there).
        try:
            storage.initialize_concurrency_limit_to_default(pool)
        except SQLAlchemyError:
            if pool not in storage.get_concurrency_keys():
                raise
    _pools_ready.append(True)


def _drive(
    context: dg.SensorEvaluationContext, state: Stores, world_store: Any, jobs: tuple[str, ...]
) -> dg.SensorResult | dg.SkipReason:
    """One tick of a lane: plan, and request the missing runs of ``jobs``; with none, wait for a change first."""
    instance = tick_instance(context)
    _ensure_pools(instance)
    deadline = Waiting(timeout_s=LONG_POLL_S, interval_s=POLL_S).deadline()
    while True:
        seen = last_change(instance, state)
        plans = _open_plans(instance, state)
        run_requests = run_requests_of(
            state,
            plans,
            world_store,
            context.log.warning,
            jobs,
            partial(run_error, instance),
            partial(_rolled_out, instance, state),
        )
        partitions = partition_requests_of(instance, plans) if "trial_job" in jobs else []
        if run_requests or partitions:
            return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=partitions)
        while last_change(instance, state) == seen:
            if deadline.expired():
                return dg.SkipReason("no experiment needs a run")
            deadline.sleep()


@dg.sensor(
    jobs=[world_job, trial_job, judge_job, rollout_job, rollout_pods_job],
    minimum_interval_seconds=1,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "The driver's rollouts: launches every requested experiment's missing worlds and trials, and the "
        "judgments of its re-scorings; opens step s+1 once step s is trained."
    ),
)
def driver_sensor(
    context: dg.SensorEvaluationContext, stores: StoresResource, world_store: dg.ResourceParam[Any]
) -> dg.SensorResult | dg.SkipReason:
    return _drive(context, stores.stores, world_store, ROLLOUT_JOBS)


@dg.sensor(
    jobs=[train_job],
    minimum_interval_seconds=1,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="The driver's training: launches each requested experiment's next training step once its trials end.",
)
def training_sensor(
    context: dg.SensorEvaluationContext, stores: StoresResource, world_store: dg.ResourceParam[Any]
) -> dg.SensorResult | dg.SkipReason:
    return _drive(context, stores.stores, world_store, TRAINING_JOBS)


def _watched(state: Stores) -> list[str]:
    wanted = rescore_experiments()
    names = state.experiments.names()
    return names if wanted == ("*",) else [n for n in wanted if n in names]


@dg.sensor(
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=f"Re-scores the experiments in ${RESCORE_EXPERIMENTS_ENV} when a new rubric appears in the registry.",
)
def rubric_sensor(context: dg.SensorEvaluationContext, stores: StoresResource) -> dg.SensorResult | dg.SkipReason:
    state = stores.stores
    current = {name: r.content_hash for name, r in state.rubrics.all().items()}
    if context.cursor is None:  # first tick: the rubrics that exist now are the baseline, not news
        return dg.SensorResult(cursor=json.dumps(current), skip_reason="the rubrics registered now are the baseline")
    seen = json.loads(context.cursor)
    new = sorted(name for name in current if name not in seen)
    if not new:
        return dg.SkipReason("no new rubric")

    def trained(config: ExperimentConfig) -> bool:
        return plan(tick_instance(context), state, config).done

    for name in _watched(state):
        for rubric in new:
            try:
                experiments.rescore(state, name, rubric, trained, requested_by="rubric_sensor")
            except Refused as err:  # still training, or a rubric this experiment's judge cannot read
                context.log.info(f"not re-scoring {name} with the new rubric {rubric}: {err}")
                continue
            experiments.drive(state, name, requested_by="rubric_sensor")
            context.log.info(f"re-scoring {name} with the new rubric {rubric}; the driver sensor launches it")
    return dg.SensorResult(cursor=json.dumps(current))
