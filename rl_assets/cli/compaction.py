"""``rl-assets compact``: a finished experiment sheds what only its runs' step-by-step logs needed.

A trial run leaves about 32 KB of Dagster events in Postgres, 12 KB of captured stdout/stderr and
6 KB of worker log on disk (docs/performance.md, "What a long experiment keeps"); at 10^6 trials that is tens
of GB, almost all of it read only by the run's own log view. Compacting a finished experiment, run
by run (its finished runs, a page at a time, so memory stays flat at any size):

- deletes the step-level events and log lines of each run (:mod:`rl_assets.stores.event_compaction`);
- deletes each run's captured stdout/stderr through the instance's compute log manager (Dagster's own
  ``delete_logs``) and the run's worker log in the home's ``logs/``.

What it keeps is everything re-scoring, forks, ``report`` and the UI read: the experiment's records
(trajectories, rewards, verdicts, ledgers, checkpoints, cached rollouts, worlds), every run and its
status and tags, and every materialization, planned materialization and asset check evaluation (so
the partition grid, the asset checks and each run's outcome read as before). It refuses an
experiment with work left or runs in flight, and compacting twice deletes nothing the second time.
Postgres reuses the freed space for new events; ``VACUUM FULL event_logs`` returns it to the disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from rl_assets.domain.run_tags import EXPERIMENT_TAG
from rl_assets.home.layout import Home
from rl_assets.stores.event_compaction import EventCompaction

PAGE = 500
"""Runs a batch: one DELETE and one page of run ids at a time."""
FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


class NotFinishedError(RuntimeError):
    """The experiment still has work (or runs in flight): compacting it now would race its runs."""


@dataclass(frozen=True)
class Compacted:
    """What one compaction removed."""

    runs: int
    events: int
    log_bytes: int
    """Bytes of captured stdout/stderr and worker logs deleted from the home's disk."""


def finished_runs(instance: dg.DagsterInstance, experiment: str) -> Iterator[list[str]]:
    """The ids of the experiment's finished runs, a page at a time."""
    filters = dg.RunsFilter(tags={EXPERIMENT_TAG: experiment}, statuses=FINISHED)
    cursor = None
    while page := list(instance.get_run_ids(filters, cursor=cursor, limit=PAGE)):
        yield page
        cursor = page[-1]


def runs_in_flight(instance: dg.DagsterInstance, experiment: str) -> int:
    """The experiment's runs that are queued, starting or running."""
    unfinished = [s for s in dg.DagsterRunStatus if s not in FINISHED]
    return instance.get_runs_count(dg.RunsFilter(tags={EXPERIMENT_TAG: experiment}, statuses=unfinished))


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def compact(instance: dg.DagsterInstance, events: EventCompaction, home: Home, experiment: str) -> Compacted:
    """Compact ``experiment``'s finished runs (the caller has checked it is finished)."""
    if runs_in_flight(instance, experiment):
        raise NotFinishedError(f"experiment {experiment!r} has runs in flight; compact it once they end")
    storage = home.dagster_home / "storage"
    runs = deleted = log_bytes = 0
    for page in finished_runs(instance, experiment):
        deleted += events.delete_step_events(page)
        for run_id in page:
            before = _tree_bytes(storage / run_id)
            instance.compute_log_manager.delete_logs(prefix=[run_id])
            log_bytes += before - _tree_bytes(storage / run_id)
            worker_log = home.logs / f"run-{run_id}.log"
            if worker_log.exists():
                log_bytes += worker_log.stat().st_size
                os.unlink(worker_log)
        runs += len(page)
    return Compacted(runs=runs, events=deleted, log_bytes=log_bytes)
