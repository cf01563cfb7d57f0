"""Execute one existing run: ``python -m rl_assets.driver.run_worker RUN_ID``."""

from __future__ import annotations

import os
import sys

from dagster import DagsterInstance
from dagster._core.execution.api import execute_run
from dagster._utils.hosted_user_process import recon_job_from_origin


def main(run_id: str) -> int:
    with DagsterInstance.get() as instance:
        run = instance.get_run_by_id(run_id)
        if run is None or run.job_code_origin is None:
            print(f"no executable run {run_id}", file=sys.stderr)
            return 2
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
