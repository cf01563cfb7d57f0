"""Runs the CLI driver launches: created in the instance, executed by a worker process.

The driver creates each run in Dagster's run storage *before* starting its
worker, so the run exists (and the planner sees it in flight) from the first
moment; then a worker process executes it with the job's own executor. The
worker tags the run with its own pid before it does anything else (see
:mod:`rl_assets.driver.run_worker`), which lets a later driver tell a live run
from one whose worker was killed, and finish it. A run without that tag is
one whose worker has not started yet, for at most ``UNCLAIMED_GRACE_S`` after
the run's creation; past that its driver died before the worker could start.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from multiprocessing.process import BaseProcess

import dagster as dg
from dagster import DagsterInstance, DagsterRun, RunsFilter

from rl_assets.definitions import RECONSTRUCTABLE_JOBS
from rl_assets.driver.planner import ACTIVE_STATUSES, Launch
from rl_assets.driver.run_worker import run_in_child
from rl_assets.services.processes import identity_alive
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


class WorkerLauncher:
    """Starts run workers forked from a warm server that imported the code location once.

    A fresh interpreter per run would spend seconds importing Dagster and the
    definitions before doing any work; a forkserver pays that once per driver.
    Each worker is still its own process, in its own session, so it outlives
    the driver that started it.
    """

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["rl_assets.driver.run_worker", "rl_assets.definitions"])

    def start(self, instance: DagsterInstance, run: DagsterRun, log_dir: str) -> BaseProcess:
        log_path = os.path.join(log_dir, f"run-{run.run_id}.log")
        proc = self._ctx.Process(target=run_in_child, args=(run.run_id, log_path), name=f"run-{run.run_id}")
        proc.start()  # the worker tags the run itself: nothing the driver does after this matters to the run
        if os.environ.get(TEST_DIE_AFTER_WORKER_START_ENV):
            os.kill(os.getpid(), signal.SIGKILL)
        return proc


def reap_dead_runs(
    instance: DagsterInstance, experiment: str, unclaimed_grace_s: float = UNCLAIMED_GRACE_S
) -> list[str]:
    """Mark failed the in-flight runs of ``experiment`` whose worker is gone, and free their pool slots.

    A run tagged with its worker is dead when that process is; an untagged
    run is dead once it is older than ``unclaimed_grace_s`` (its worker, if it
    ever starts, then finds the run failed and does not execute it).
    """
    reaped = []
    runs = instance.get_runs(filters=RunsFilter(tags={EXPERIMENT_TAG: experiment, LAUNCHED_BY_TAG: "cli-driver"}))
    for run in runs:
        if run.status not in ACTIVE_STATUSES:
            continue
        worker = run.tags.get(WORKER_PID_TAG)
        if worker is not None:
            dead = not identity_alive(worker)
        else:
            record = instance.get_run_record_by_id(run.run_id)
            dead = record is not None and time.time() - record.create_timestamp.timestamp() > unclaimed_grace_s
        if dead:
            instance.report_run_failed(run, "the run's worker process died; the driver will launch the unit again")
            # Its pool slots (a judge slot, say) would otherwise stay claimed: without a daemon nothing frees them.
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            reaped.append(run.run_id)
    return reaped
