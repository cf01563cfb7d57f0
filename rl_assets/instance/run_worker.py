"""One run's worker, forked by :class:`~rl_assets.instance.run_launcher.WarmRunLauncher`.

Before doing any work the worker tags the run with its own ``pid@start-time``
(:data:`~rl_assets.domain.run_tags.WORKER_PID_TAG`), so the run's liveness is known
from the worker's first moment, whatever happens to the daemon that launched
it. It then executes the run as Dagster's own launchers do in a pod or a
container, with ``dagster api execute_run``'s body, here in-process in the warm
worker instead of a fresh interpreter
(:func:`rl_assets.instance.dagster_internals.execute_run`). A run that is no
longer starting (failed by run monitoring before this worker claimed it) is not
executed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from dagster import DagsterInstance, DagsterRunStatus

from rl_assets.domain.run_tags import WORKER_PID_TAG
from rl_assets.home.layout import Home
from rl_assets.home.services.processes import process_identity
from rl_assets.home.services.run_workers import worker_file
from rl_assets.instance.dagster_internals import execute_run

CLAIMABLE = (DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING)


def _carry_on() -> None:
    """What a worker does between tagging its run and claiming it: nothing."""


def main(run_id: str, after_tagging: Callable[[], None] = _carry_on) -> int:
    """Tag the run with this worker, then execute it if it is still starting; the exit code.

    ``after_tagging`` runs between the two: the moment at which the launcher's death must not matter, where the
    test kit holds a worker to prove it does not.
    """
    with DagsterInstance.get() as instance:
        run = instance.get_run_by_id(run_id)
        if run is None or run.job_code_origin is None:
            print(f"no executable run {run_id}", file=sys.stderr)
            return 2
        identity = process_identity(os.getpid())
        instance.add_run_tags(run_id, {WORKER_PID_TAG: identity})
        worker_file(Home.resolve(), run_id).write_text(identity)
        after_tagging()
        run = instance.get_run_by_id(run_id)
        if run is None or run.status not in CLAIMABLE:
            status = "gone" if run is None else run.status.value
            print(f"run {run_id} is {status} (failed before its worker claimed it); not executing it", file=sys.stderr)
            return 1
        return execute_run(run_id, instance)


def _report_start_failure(run_id: str, err: BaseException) -> None:
    """Fail the run with the worker's error, if it is still waiting for a worker: run monitoring would fail it
    only at its start time-out, with no reason, and a following command could not tell a broken start from a
    slow one."""
    first = (str(err).strip().splitlines() or [""])[0]
    with DagsterInstance.get() as instance:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.status in CLAIMABLE:
            instance.report_run_failed(run, f"the run's worker could not start it: {type(err).__name__}: {first}")


def run_in_child(run_id: str, log_path: str, after_tagging: Callable[[], None] = _carry_on) -> None:
    """Entry point of a forked worker: own session, output to the run's log file."""
    os.setsid()
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        code = main(run_id, after_tagging)
    except Exception as err:
        _report_start_failure(run_id, err)
        raise
    finally:
        worker_file(Home.resolve(), run_id).unlink(missing_ok=True)
    sys.exit(code)
