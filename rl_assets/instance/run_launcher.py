"""The home's run launcher: every run starts here, whoever asked for it.

The driver sensor's requests, the launchpad's runs and backfills all go
through the daemon's run queue to this launcher (the home's ``dagster.yaml``
names it). Dagster's ``DefaultRunLauncher`` asks the code server to spawn a
fresh interpreter per run, which imports Dagster and the definitions again
(seconds per run, most of a short trial); this launcher forks each run's
worker from a forkserver that imported them once. Each worker runs in a
session of its own, so it outlives the daemon, and it tags the run with its
``pid@start-time`` before anything else (:mod:`rl_assets.instance.run_worker`).
That tag is what :meth:`WarmRunLauncher.check_run_worker_health` reads, so
Dagster's run monitoring fails the run of a dead worker and run retries
launch it again: no reaper of our own.

It is a ``dagster.DefaultRunLauncher`` (Dagster's public launcher class, for
its configuration plumbing) that overrides every method that launches, ends
or checks a run. What Dagster exports under no public name (the health
result types, the ``execute_run`` argument) comes from
:mod:`rl_assets.instance.dagster_internals`, the one module that touches
Dagster's internals.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.context import ForkServerContext
from typing import Any

import dagster as dg

from rl_assets.domain.run_tags import WORKER_PID_TAG
from rl_assets.home.layout import Home
from rl_assets.home.services.processes import identity_alive
from rl_assets.instance.dagster_internals import CheckRunHealthResult, LaunchRunContext, WorkerStatus, launcher_instance

PRELOAD = ["rl_assets.instance.run_worker", "rl_assets.instance.warm"]
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

    def worker(self, run_id: str, log_path: str) -> tuple[Callable[..., None], tuple[Any, ...]]:
        """The forked worker's entry point and its arguments: a subclass may give the worker more to do (the test
        kit's holds it between tagging its run and claiming it)."""
        from rl_assets.instance.run_worker import run_in_child

        return run_in_child, (run_id, log_path)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        target, args = self.worker(run.run_id, os.path.join(Home.resolve().logs, f"run-{run.run_id}.log"))
        with self._lock:
            proc = self._context().Process(target=target, args=args, name=f"run-{run.run_id}")
            proc.start()  # the worker tags the run itself: nothing this process does after this matters to the run
            multiprocessing.active_children()  # forget the workers that have ended

    def terminate(self, run_id: str) -> bool:
        """Cancel a run the way Ctrl-C would: its worker turns SIGINT into a canceled run."""
        instance = launcher_instance(self)
        run = instance.get_run_by_id(run_id)
        worker = run.tags.get(WORKER_PID_TAG) if run is not None else None
        if run is None or worker is None or not identity_alive(worker):
            return False
        instance.report_run_canceling(run)
        os.kill(int(worker.partition("@")[0]), signal.SIGINT)
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        worker = run.tags.get(WORKER_PID_TAG)
        if worker is None:
            return CheckRunHealthResult(WorkerStatus.NOT_FOUND, "the run has no worker")
        if identity_alive(worker):
            return CheckRunHealthResult(WorkerStatus.RUNNING, run_worker_id=worker)
        return CheckRunHealthResult(
            WorkerStatus.FAILED, f"the run's worker process died ({worker})", run_worker_id=worker
        )
