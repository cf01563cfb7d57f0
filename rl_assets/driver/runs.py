"""Runs the CLI driver starts: created in the instance, launched by the instance's run launcher.

The driver creates each run in Dagster's run storage *before* launching it,
so the run exists (and the planner sees it in flight) from the first moment.
It then launches it with ``DagsterInstance.launch_run``, through the run
launcher the home's ``dagster.yaml`` names
(:class:`~rl_assets.driver.run_launcher.WarmRunLauncher`): the same launcher,
and the same worker, as the runs the daemon launches for the UI, sensors and
backfills. The worker tags the run with its own pid before it does anything
else, which lets a later driver tell a live run from one whose worker was
killed, and finish it (:func:`reap_dead_runs`, with the launcher's own health
check). A run without that tag is one whose worker has not started yet, for
at most ``UNCLAIMED_GRACE_S`` after the run's creation; past that its driver
died before the worker could start.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import dagster as dg
from dagster import DagsterInstance, DagsterRun, RunsFilter

from rl_assets.definitions import RECONSTRUCTABLE_JOBS
from rl_assets.driver.planner import ACTIVE_STATUSES, Launch
from rl_assets.tags import EXPERIMENT_TAG, WORKER_PID_TAG

LAUNCHED_BY_TAG = "rl/launched_by"
UNCLAIMED_GRACE_S = 60.0
"""A created run that no worker claimed within this long was lost with its driver."""
TEST_DIE_AFTER_WORKER_START_ENV = "RL_ASSETS_TEST_DIE_AFTER_WORKER_START"
"""Test hook: when set, the driver SIGKILLs itself the moment its first worker process exists."""


def create_run(instance: DagsterInstance, launch: Launch) -> DagsterRun:
    recon = dg.reconstructable(RECONSTRUCTABLE_JOBS[launch.job])
    job_def = recon.get_definition()
    return instance.create_run_for_job(
        job_def=job_def,
        tags={**job_def.tags, **launch.tags, LAUNCHED_BY_TAG: "cli-driver"},
        job_code_origin=recon.get_python_origin(),
    )


def launch_run(instance: DagsterInstance, run: DagsterRun) -> None:
    """Start the run's worker through the instance's launcher (no workspace: the warm launcher needs none)."""
    workspace: Any = None
    instance.launch_run(run.run_id, workspace)
    if os.environ.get(TEST_DIE_AFTER_WORKER_START_ENV):
        os.kill(os.getpid(), signal.SIGKILL)


def reap_dead_runs(
    instance: DagsterInstance, experiment: str, unclaimed_grace_s: float = UNCLAIMED_GRACE_S
) -> list[str]:
    """Mark failed the in-flight runs of ``experiment`` whose worker is gone, and free their pool slots.

    A run tagged with its worker is dead when the launcher's health check says
    so; an untagged run is dead once it is older than ``unclaimed_grace_s``
    (its worker, if it ever starts, then finds the run failed and does not
    execute it).
    """
    reaped = []
    runs = instance.get_runs(filters=RunsFilter(tags={EXPERIMENT_TAG: experiment, LAUNCHED_BY_TAG: "cli-driver"}))
    for run in runs:
        if run.status not in ACTIVE_STATUSES:
            continue
        if run.tags.get(WORKER_PID_TAG) is not None:
            health = instance.run_launcher.check_run_worker_health(run)
            dead = health.status.value == "FAILED"
        else:
            record = instance.get_run_record_by_id(run.run_id)
            dead = record is not None and time.time() - record.create_timestamp.timestamp() > unclaimed_grace_s
        if dead:
            instance.report_run_failed(run, "the run's worker process died; the driver will launch the unit again")
            # Its pool slots (a judge slot, say) would otherwise stay claimed: without a daemon nothing frees them.
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            reaped.append(run.run_id)
    return reaped
