"""The CLI's driver process: ``python -m rl_assets.driver.loop EXPERIMENT [RUBRIC]``.

With a rubric other than the experiment's own, it drives a re-scoring.

Each pass reaps runs whose worker died, plans from durable state, and starts
the runs the plan asks for, at most ``max_concurrent_trials`` trials at once,
through the instance's run launcher (:mod:`rl_assets.driver.runs`). It keeps
no memory of its own, so losing it (a crash) is harmless: runs outlive the
driver, and the next driver sees them in the instance. One driver per experiment at a time, enforced by a
Postgres advisory lock held for the driver's life (:func:`rl_assets.stores.locks.driver_lock`),
on a connection of its own: a restarted Postgres drops the connection and with
it the lock, which is then taken again on a new connection, or the driver stops
if another driver took it in between. The driver sensor holds the same lock
(shared) while it plans the experiment, and a starting driver waits for it;
runs the sensor requested but the daemon has not yet created count as in
flight (:mod:`rl_assets.stores.sensor_requests`).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from dagster import DagsterInstance, RunsFilter

from rl_assets.assets.partitions import STEP, TRIAL_SLOT, WORLD
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import Runtime
from rl_assets.driver.planner import UNIT_JOBS, give_up_on_crashing, plan
from rl_assets.driver.runs import create_run, launch_run, reap_dead_runs
from rl_assets.home import Home
from rl_assets.resources.stores import Stores
from rl_assets.services.ray_head import RAY_ADDRESS_ENV, LocalRayHead
from rl_assets.stores import sensor_requests
from rl_assets.stores.database import TRANSIENT_DB_ERRORS, Database
from rl_assets.stores.locks import SessionLock, driver_lock
from rl_assets.tags import EXPERIMENT_TAG, SENSOR_REQUEST_TAG

EXIT_BUSY = 75
DB_OUTAGE_TIMEOUT_S = 180.0
EXIT_GAVE_UP = 70
POLL_S = 0.25
SENSOR_TICK_WAIT_S = 60.0
"""How long a starting driver waits for a driver sensor's tick that holds the experiment's lock."""


def _ensure_partitions(instance: DagsterInstance, name: str, keys: list[str]) -> None:
    missing = [k for k in keys if not instance.has_dynamic_partition(name, k)]
    if missing:
        instance.add_dynamic_partitions(name, missing)


def _ensure_trainer_cluster(home: Home) -> None:
    """Restart the home's Ray head if it died, on the address run workers were given.

    Only the home's own head is restarted; a remote cluster (KubeRay) is the
    deployment's to keep alive, and a train run against it fails and is retried.
    """
    head = LocalRayHead(home)
    if os.environ.get(RAY_ADDRESS_ENV) == head.address() and not head.is_running():
        print("the Ray head is down; restarting it", file=sys.stderr)
        head.ensure_running()


def _take_lock(lock: SessionLock, db: Database, experiment: str) -> bool:
    """Take the driver lock, waiting out a driver sensor's tick that is planning the experiment."""
    deadline = time.monotonic() + SENSOR_TICK_WAIT_S
    waited = False
    while not lock.hold():
        if not sensor_requests.sensor_is_planning(db, lock.lock) or time.monotonic() > deadline:
            return False
        if not waited:
            print(f"a driver sensor tick is planning {experiment!r}; waiting for it", file=sys.stderr)
            waited = True
        time.sleep(POLL_S)
    return True


def _sensor_runs_pending(instance: DagsterInstance, stores: Stores, experiment: str) -> list[str]:
    """Run keys the driver sensor requested for ``experiment`` whose runs the daemon has not created yet."""

    def created() -> set[str]:
        runs = instance.get_runs(filters=RunsFilter(tags={EXPERIMENT_TAG: experiment}))
        return {r.tags[SENSOR_REQUEST_TAG] for r in runs if SENSOR_REQUEST_TAG in r.tags}

    return sensor_requests.pending(stores.db, experiment, created)


def drive(experiment: str, home: Home, rubric: str | None = None) -> int:
    db = Database.from_env()
    stores = Stores(home.root, db)
    config = stores.experiments.get(experiment)
    with db.transaction() as cur:
        lock = SessionLock(db.info, driver_lock(cur, experiment))
    if not _take_lock(lock, db, experiment):
        print(f"another driver is already running experiment {experiment!r}", file=sys.stderr)
        return EXIT_BUSY
    attempt = stores.attempts.record_driver_attempt(experiment, os.getpid())
    runtime = stores.experiments.runtime(experiment)
    said: set[str] = set()
    outage_since: float | None = None
    with DagsterInstance.get() as instance:
        _ensure_partitions(instance, WORLD.name, config.world_ids)
        _ensure_partitions(instance, TRIAL_SLOT.name, config.trial_slots())
        while True:
            try:
                if not lock.hold():
                    print(f"another driver took over experiment {experiment!r}", file=sys.stderr)
                    return EXIT_BUSY
                outcome = _pass(instance, stores, home, config, runtime, rubric, attempt, said)
                if outcome is not None:
                    return outcome
                outage_since = None
            except TRANSIENT_DB_ERRORS as err:
                if outage_since is None:
                    outage_since = time.monotonic()
                    print(f"the database is unavailable ({type(err).__name__}); waiting for it", file=sys.stderr)
                elif time.monotonic() - outage_since > DB_OUTAGE_TIMEOUT_S:
                    raise
            time.sleep(POLL_S)


def _pass(
    instance: DagsterInstance,
    stores: Stores,
    home: Home,
    config: ExperimentConfig,
    runtime: Runtime,
    rubric: str | None,
    attempt: int,
    said: set[str],
) -> int | None:
    """One pass: reap, plan, launch. Returns an exit code when the driver is done.

    ``said`` holds the sensor requests already waited for, so each wait is reported once.
    """
    reap_dead_runs(instance, config.name)
    # Before planning: a requested run created after this check was still pending at it, and one created
    # before it is in the run storage the plan reads; checked after planning, a run created in between
    # would be neither waited for nor seen.
    waiting_for = _sensor_runs_pending(instance, stores, config.name)
    if waiting_for:  # in flight: launching their units now would run them twice
        if waiting_for[0] not in said:
            said.add(waiting_for[0])
            print(f"waiting for {len(waiting_for)} runs the driver sensor requested", file=sys.stderr)
        return None
    p = plan(instance, stores, config, rubric)
    crash_at = runtime.faults.crash_driver_at_step
    if crash_at is not None and attempt == 1 and p.steps_trained > crash_at:
        os.kill(os.getpid(), signal.SIGKILL)  # injected driver crash
    if p.done:
        return 0
    triage = give_up_on_crashing(stores, p)
    if triage.stuck:
        launch = triage.stuck[0]
        print(
            f"{launch.job} {launch.partition_key} failed {launch.failures} times; giving up; "
            f"see the run logs in {home.logs}",
            file=sys.stderr,
        )
        return EXIT_GAVE_UP
    _ensure_partitions(instance, STEP.name, [s.key for s in p.steps])
    in_flight = sum(s.count("running") for s in p.steps)
    for launch in triage.launches:
        if launch.job in UNIT_JOBS:
            if in_flight >= runtime.execution.max_concurrent_trials:
                continue
            in_flight += 1
        if launch.job == "train_job":
            _ensure_trainer_cluster(home)
        launch_run(instance, create_run(instance, launch))
    return None


if __name__ == "__main__":
    sys.exit(drive(sys.argv[1], Home.resolve(), sys.argv[2] if len(sys.argv) > 2 else None))
