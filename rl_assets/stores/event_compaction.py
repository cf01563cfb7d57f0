"""The step-level events of finished runs, deleted: what compacting an experiment removes from Postgres.

Dagster keeps every event of every run for ever (about 32 KB a trial run here, most of it the step's
engine chatter and log lines). This module knows Dagster's ``event_logs`` table by two columns
(``run_id``, ``dagster_event_type``) and imports no Dagster. It deletes only the types in
:data:`DROPPED`, which nothing but a run's own log view reads: asset materializations and their planned
events, observations, asset check evaluations, step success and failure, and the run's lifecycle
events all stay, so the asset catalog, the partition grid, the checks and every run's outcome read as
before.
"""

from __future__ import annotations

from collections.abc import Sequence

from rl_assets.stores.database import Database

DROPPED = (
    "ENGINE_EVENT",
    "STEP_WORKER_STARTING",
    "STEP_WORKER_STARTED",
    "RESOURCE_INIT_STARTED",
    "RESOURCE_INIT_SUCCESS",
    "LOGS_CAPTURED",
    "STEP_START",
    "STEP_INPUT",
    "STEP_OUTPUT",
    "LOADED_INPUT",
    "HANDLED_OUTPUT",
)
"""Event types of a step's progress (Dagster's ``DagsterEventType`` values); plain log lines have no type."""


class EventCompaction:
    def __init__(self, db: Database) -> None:
        self.db = db

    def delete_step_events(self, run_ids: Sequence[str]) -> int:
        """Delete the step-level events and log lines of ``run_ids`` (finished runs); the number deleted."""
        if not run_ids:
            return 0
        with self.db.transaction() as cur:
            cur.execute(
                "DELETE FROM event_logs WHERE run_id = ANY(%s)"
                " AND (dagster_event_type IS NULL OR dagster_event_type = ANY(%s))",
                (list(run_ids), list(DROPPED)),
            )
            return cur.rowcount

    def events_by_type(self, run_ids: Sequence[str]) -> dict[str, int]:
        """How many events of each type ``run_ids`` have (``log`` for plain log lines)."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT COALESCE(dagster_event_type, 'log'), count(*) FROM event_logs"
                " WHERE run_id = ANY(%s) GROUP BY 1",
                (list(run_ids),),
            )
            return {kind: n for kind, n in cur.fetchall()}
