"""Execute one existing run: ``python -m rl_assets.driver.run_worker RUN_ID``.

Before doing any work the worker tags the run with its own ``pid@start-time``
(:data:`~rl_assets.tags.WORKER_PID_TAG`), so the run's liveness is known
from the worker's first moment, whatever happens to the driver that started
it: a driver killed right after forking the worker leaves a run that a later
driver's reaper sees alive, not one it would mark failed (and whose unit it
would relaunch, deleting the live attempt's fork).
"""

from __future__ import annotations

import os
import sys
import time

from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.execution.api import execute_run
from dagster._utils.hosted_user_process import recon_job_from_origin

from rl_assets.services.processes import process_identity
from rl_assets.tags import WORKER_PID_TAG

TEST_GATE_ENV = "RL_ASSETS_TEST_WORKER_GATE"
"""Test hook: a path; the worker, once it has tagged the run, waits until that file exists."""


def _wait_for_gate() -> None:
    gate = os.environ.get(TEST_GATE_ENV)
    while gate and not os.path.exists(gate):
        time.sleep(0.05)


def main(run_id: str) -> int:
    with DagsterInstance.get() as instance:
        run = instance.get_run_by_id(run_id)
        if run is None or run.job_code_origin is None:
            print(f"no executable run {run_id}", file=sys.stderr)
            return 2
        instance.add_run_tags(run_id, {WORKER_PID_TAG: process_identity(os.getpid())})
        _wait_for_gate()
        run = instance.get_run_by_id(run_id)
        if run is None or run.status != DagsterRunStatus.NOT_STARTED:
            status = "gone" if run is None else run.status.value
            print(f"run {run_id} is {status} (reaped before its worker claimed it); not executing it", file=sys.stderr)
            return 1
        result = execute_run(recon_job_from_origin(run.job_code_origin), run, instance)
        return 0 if result.success else 1


def run_in_child(run_id: str, log_path: str) -> None:
    """Entry point of a forked worker: own session, output to the run's log file."""
    os.setsid()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    sys.exit(main(run_id))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
