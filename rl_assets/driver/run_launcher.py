"""The home's run launcher: every run starts here, whoever asked for it.

The driver sensor's requests, the launchpad's runs and backfills all go
through the daemon's run queue to this launcher (the home's ``dagster.yaml``
names it). Dagster's ``DefaultRunLauncher`` asks the code server to spawn a
fresh interpreter per run, which imports Dagster and the definitions again
(seconds per run, most of a short trial); this launcher forks each run's
worker from a forkserver that imported them once. Each worker runs in a
session of its own, so it outlives the daemon, and it tags the run with its
``pid@start-time`` before anything else (:mod:`rl_assets.driver.run_worker`).
That tag is what :meth:`WarmRunLauncher.check_run_worker_health` reads, so
Dagster's run monitoring fails the run of a dead worker and run retries
launch it again: no reaper of our own.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import typing
from multiprocessing.context import ForkServerContext
from typing import Any

import dagster as dg

from rl_assets.home import Home
from rl_assets.services.processes import identity_alive
from rl_assets.tags import WORKER_PID_TAG

# Dagster 1.13 exports the launcher base class's result types under no public name; they are read off the
# public launcher's own signature, so no private module is imported for them.
_HealthResult: Any = typing.get_type_hints(dg.DefaultRunLauncher.check_run_worker_health)["return"]
_WorkerStatus: Any = typing.get_type_hints(_HealthResult)["status"]

PRELOAD = ["rl_assets.driver.run_worker", "rl_assets.driver.warm"]
"""What the forkserver imports once, so a worker starts with Dagster and the definitions loaded."""


class WarmRunLauncher(dg.DefaultRunLauncher):
    """Runs each run in a worker forked from a warm forkserver; health is the worker's pid tag."""

    def __init__(self, inst_data: Any = None) -> None:
        super().__init__(inst_data=inst_data)
        self._forkserver: ForkServerContext | None = None
        self._lock = threading.Lock()
        """The run queue launches from several threads (``dequeue_use_threads``); forks are started one at a time."""

    def _context(self) -> ForkServerContext:
        """The forkserver, started on first use: processes that never launch (the UI, a CLI) never pay for it."""
        if self._forkserver is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            self._forkserver = ctx
        return self._forkserver

    def launch_run(self, context: Any) -> None:
        from rl_assets.driver.run_worker import run_in_child

        run = context.dagster_run
        log_path = os.path.join(Home.resolve().logs, f"run-{run.run_id}.log")
        with self._lock:
            proc = self._context().Process(target=run_in_child, args=(run.run_id, log_path), name=f"run-{run.run_id}")
            proc.start()  # the worker tags the run itself: nothing this process does after this matters to the run
            multiprocessing.active_children()  # forget the workers that have ended

    def terminate(self, run_id: str) -> bool:
        """Cancel a run the way Ctrl-C would: its worker turns SIGINT into a canceled run."""
        run = self._instance.get_run_by_id(run_id)
        worker = run.tags.get(WORKER_PID_TAG) if run is not None else None
        if run is None or worker is None or not identity_alive(worker):
            return False
        self._instance.report_run_canceling(run)
        os.kill(int(worker.partition("@")[0]), signal.SIGINT)
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> Any:
        worker = run.tags.get(WORKER_PID_TAG)
        if worker is None:
            return _HealthResult(_WorkerStatus.NOT_FOUND, "the run has no worker")
        if identity_alive(worker):
            return _HealthResult(_WorkerStatus.RUNNING, run_worker_id=worker)
        return _HealthResult(_WorkerStatus.FAILED, f"the run's worker process died ({worker})", run_worker_id=worker)
