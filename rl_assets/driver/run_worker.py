"""Execute one existing run: ``python -m rl_assets.driver.run_worker RUN_ID``."""

from __future__ import annotations

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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
