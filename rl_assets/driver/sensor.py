"""The driver as Dagster sensors, for ``dagster dev`` and Kubernetes.

``driver_sensor`` plans every unfinished experiment, and every requested
re-scoring, that no CLI driver holds, and requests their runs with
deterministic run keys (job, partition, rubric, generation), so a second
tick, or a second daemon, never launches the same unit twice. Needed dynamic
partitions are added in the same tick, before the runs. It plans an
experiment holding the experiment's driver lock and records its requests
before letting go, so a CLI driver never plans the same units in between
(:mod:`rl_assets.stores.sensor_requests`).

``rubric_sensor`` (off by default; turn it on in the UI's sensor list or with
``dagster sensor start rubric_sensor``) watches the rubric registry; when a
new rubric appears it requests the re-scoring of the finished experiments
named in ``RL_ASSETS_RESCORE_EXPERIMENTS`` (comma-separated, ``*`` for all),
records the new ``rubrics`` data version, and starts the first runs. Its
cursor holds the rubrics already seen, and requests are idempotent, so a
rubric triggers one re-scoring however often the sensor ticks.
"""

import json
from collections.abc import Callable
from typing import Any

import dagster as dg
from dagster import DagsterInstance

from rl_assets.assets.partitions import STEP, TRIAL_SLOT, WORLD
from rl_assets.driver.planner import Plan, give_up_on_crashing, plan
from rl_assets.environment import launch_tags, rescore_experiments
from rl_assets.jobs import judge_job, train_job, trial_job, world_job
from rl_assets.resources.stores import Stores, StoresResource
from rl_assets.settings import RESCORE_EXPERIMENTS_ENV
from rl_assets.stores import sensor_requests
from rl_assets.stores.locks import LockKey, driver_lock
from rl_assets.tags import RUBRIC_TAG, SENSOR_REQUEST_TAG


def _driver_lock(state: Stores, experiment: str) -> LockKey:
    with state.db.transaction() as cur:
        return driver_lock(cur, experiment)


def _experiment_plans(instance: DagsterInstance, state: Stores, name: str) -> list[Plan]:
    """The unfinished plans of an experiment: its own, or once that is done, its requested re-scorings."""
    config = state.experiments.get(name)
    own = plan(instance, state, config)
    plans = [own]
    if own.done:
        plans += [plan(instance, state, config, rubric) for rubric in state.scorings.requested(name)]
    return [p for p in plans if not p.done]


def _run_requests(
    state: Stores, plans: list[Plan], world_store: Any, warn: Callable[[str], None]
) -> list[dg.RunRequest]:
    """The plans' launches as run requests, less the units given up on (as the CLI's driver gives up on them)."""
    requests = []
    for p in plans:
        triage = give_up_on_crashing(state, p)
        for trial in triage.failed_trials:
            warn(f"{trial.trial_id} of {p.config.name}: its runs failed {trial.failures} times; failed for good")
        for launch in triage.stuck:
            warn(f"{launch.job} {launch.partition_key} failed {launch.failures} times; not launching it again")
        for launch in triage.launches:
            run_key = f"{launch.run_key}:{launch.tags[RUBRIC_TAG]}"
            requests.append(
                dg.RunRequest(
                    run_key=run_key,
                    job_name=launch.job,
                    partition_key=launch.partition_key,
                    tags={
                        **launch.tags,
                        **launch_tags(launch.job, launch.partition_key, world_store),
                        SENSOR_REQUEST_TAG: run_key,
                    },
                )
            )
    return requests


def _planned_requests(
    state: Stores,
    names: list[str],
    plans_of: Callable[[str], list[Plan]],
    world_store: Any,
    warn: Callable[[str], None],
) -> tuple[list[dg.RunRequest], list[Plan]]:
    """Plan each experiment that no CLI driver holds, holding its lock until the requests are recorded.

    The lock covers the whole plan, and the recorded requests cover the time
    until the daemon has created their runs, so a CLI driver starting at any
    moment sees the sensor's units as in flight (see
    :mod:`rl_assets.stores.sensor_requests`).
    """
    run_requests: list[dg.RunRequest] = []
    all_plans: list[Plan] = []
    for name in names:
        with sensor_requests.planning_lock(state.db, _driver_lock(state, name)) as cur:
            if cur is None:
                continue  # a CLI driver holds the experiment
            plans = plans_of(name)
            requests = _run_requests(state, plans, world_store, warn)
            sensor_requests.record(cur, name, [r.run_key for r in requests if r.run_key])
        run_requests += requests
        all_plans += plans
    return run_requests, all_plans


def _partition_requests(instance: DagsterInstance, plans: list[Plan]) -> list[dg.AddDynamicPartitionsRequest]:
    add: dict[str, set[str]] = {WORLD.name: set(), TRIAL_SLOT.name: set(), STEP.name: set()}
    for p in plans:
        add[WORLD.name].update(p.config.world_ids)
        add[TRIAL_SLOT.name].update(p.config.trial_slots())
        add[STEP.name].update(s.key for s in p.steps)
    partitions = [
        dg.AddDynamicPartitionsRequest(
            partitions_def_name=name,
            partition_keys=sorted(k for k in keys if not instance.has_dynamic_partition(name, k)),
        )
        for name, keys in add.items()
    ]
    return [r for r in partitions if r.partition_keys]


@dg.sensor(
    jobs=[world_job, trial_job, judge_job, train_job],
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Opens step s+1 of every experiment when step s is trained; launches missing units and re-scorings.",
)
def driver_sensor(
    context: dg.SensorEvaluationContext, stores: StoresResource, world_store: dg.ResourceParam[Any]
) -> dg.SensorResult | dg.SkipReason:
    state = stores.stores
    run_requests, plans = _planned_requests(
        state,
        state.experiments.names(),
        lambda name: _experiment_plans(context.instance, state, name),
        world_store,
        context.log.warning,
    )
    partitions = _partition_requests(context.instance, plans)
    if not run_requests and not partitions:
        return dg.SkipReason("no experiment needs a run")
    return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=partitions)


def _watched(state: Stores) -> list[str]:
    wanted = rescore_experiments()
    names = state.experiments.names()
    return names if wanted == ("*",) else [n for n in wanted if n in names]


@dg.sensor(
    jobs=[judge_job, train_job],
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=f"Re-scores the experiments in ${RESCORE_EXPERIMENTS_ENV} when a new rubric appears in the registry.",
)
def rubric_sensor(
    context: dg.SensorEvaluationContext, stores: StoresResource, world_store: dg.ResourceParam[Any]
) -> dg.SensorResult | dg.SkipReason:
    state = stores.stores
    registry = state.rubrics
    current = {name: r.content_hash for name, r in registry.all().items()}
    observation = dg.AssetObservation(
        asset_key="rubrics", tags={"dagster/data_version": registry.version()}, metadata={"rubrics": current}
    )
    if context.cursor is None:  # first tick: the rubrics that exist now are the baseline, not news
        return dg.SensorResult(cursor=json.dumps(current), asset_events=[observation])
    seen = json.loads(context.cursor)
    new = sorted(name for name in current if name not in seen)
    if not new:
        return dg.SkipReason("no new rubric")

    def rescorings(name: str) -> list[Plan]:
        config = state.experiments.get(name)
        if not plan(context.instance, state, config).done:
            context.log.info(f"{name} is still training; re-score it once it is done")
            return []
        plans = []
        for rubric in new:
            state.rubrics.get(rubric)  # pin the rubric's hash before anything is judged with it
            state.scorings.request(name, rubric, requested_by="rubric_sensor")
            context.log.info(f"re-scoring {name} with the new rubric {rubric}")
            plans.append(plan(context.instance, state, config, rubric))
        return plans

    run_requests, plans = _planned_requests(state, _watched(state), rescorings, world_store, context.log.warning)
    return dg.SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=_partition_requests(context.instance, plans),
        cursor=json.dumps(current),
        asset_events=[observation],
    )
