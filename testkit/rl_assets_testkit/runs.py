"""One run created and launched directly, for benchmarks and tests that time or gate a single run.

Experiments are driven by the daemon's driver sensor; this is the same
launch without the sensor and the queue: the run is created in the instance
from the job's in-process definition, then launched through the instance's
run launcher (:class:`~rl_assets.instance.run_launcher.WarmRunLauncher`, which
needs no workspace), so its worker is the one every run gets.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import dagster as dg
from dagster import DagsterInstance, DagsterRun

from rl_assets.definitions import RECONSTRUCTABLE_JOBS
from rl_assets.driver.planner import Launch
from rl_assets_testkit.gated_launcher import gated_instance

TEST_DIE_AFTER_WORKER_START_ENV = "RL_ASSETS_TEST_DIE_AFTER_WORKER_START"
"""Test hook: when set, the launching process SIGKILLs itself the moment the worker process exists."""


def create_run(instance: DagsterInstance, launch: Launch) -> DagsterRun:
    recon = dg.reconstructable(RECONSTRUCTABLE_JOBS[launch.job])
    job_def = recon.get_definition()
    return instance.create_run_for_job(
        job_def=job_def,
        tags={**job_def.tags, **launch.tags},
        job_code_origin=recon.get_python_origin(),
    )


def launch_run(instance: DagsterInstance, run: DagsterRun) -> None:
    """Start the run's worker through the instance's launcher (no workspace: the warm launcher needs none)."""
    workspace: Any = None
    instance.launch_run(run.run_id, workspace)
    if os.environ.get(TEST_DIE_AFTER_WORKER_START_ENV):
        os.kill(os.getpid(), signal.SIGKILL)


def relaunch(run_id: str, gate: str | None = None) -> None:
    """Launch an existing run from a process of its own (``python -c``): a stand-in for the daemon's launch.

    With a ``gate``, the run's worker waits for that file once it has tagged the run
    (:class:`~rl_assets_testkit.gated_launcher.GatedRunLauncher`).
    """
    with DagsterInstance.get() if gate is None else gated_instance(gate) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None, run_id
        launch_run(instance, run)
