"""The driver as a Dagster sensor, for ``dagster dev`` and Kubernetes.

Each tick plans every unfinished experiment that no CLI driver holds and
requests its runs with deterministic run keys (job, partition, generation),
so a second tick, or a second daemon, never launches the same unit twice.
Needed dynamic partitions are added in the same tick, before the runs.
"""

import dagster as dg

from rl_assets.assets.partitions import STEP, TRIAL_SLOT, WORLD
from rl_assets.driver.planner import driver_lock_id, plan
from rl_assets.jobs import train_job, trial_job, world_job
from rl_assets.resources.stores import StoresResource


def _held_by_cli_driver(stores: StoresResource, experiment: str) -> bool:
    conn = stores.stores.db.connection()
    lock_id = driver_lock_id(experiment)
    with conn, conn.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", (lock_id,))
        acquired = cur.fetchone()[0]
        if acquired:
            cur.execute("SELECT pg_advisory_unlock(%s)", (lock_id,))
    return not acquired


@dg.sensor(
    jobs=[world_job, trial_job, train_job],
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Opens step s+1 of every experiment when step s is trained; launches missing units.",
)
def driver_sensor(context: dg.SensorEvaluationContext, stores: StoresResource) -> dg.SensorResult | dg.SkipReason:
    state = stores.stores
    run_requests: list[dg.RunRequest] = []
    add: dict[str, set[str]] = {WORLD.name: set(), TRIAL_SLOT.name: set(), STEP.name: set()}
    for name in state.experiments.names():
        if _held_by_cli_driver(stores, name):
            continue
        config = state.experiments.get(name)
        p = plan(context.instance, state, config)
        if p.done:
            continue
        add[WORLD.name].update(config.world_ids)
        add[TRIAL_SLOT.name].update(config.trial_slots())
        add[STEP.name].update(s.key for s in p.steps)
        run_requests += [
            dg.RunRequest(
                run_key=launch.run_key, job_name=launch.job, partition_key=launch.partition_key, tags=launch.tags
            )
            for launch in p.launches
        ]
    requests = [
        dg.AddDynamicPartitionsRequest(
            partitions_def_name=name,
            partition_keys=sorted(k for k in keys if not context.instance.has_dynamic_partition(name, k)),
        )
        for name, keys in add.items()
    ]
    requests = [r for r in requests if r.partition_keys]
    if not run_requests and not requests:
        return dg.SkipReason("no experiment needs a run")
    return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=requests)
