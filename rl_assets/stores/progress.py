"""Progress notes: the driver's one-line view of each experiment it plans, kept for ``status``.

The driver plans every driven experiment on each tick; it writes the line a
plan comes to (the open step's trials ok, failed, running and pending, or
done) when the line changes, and ``train`` writes the line it finished on.
``status`` then reads one row instead of asking Dagster for the runs in
flight, so it loads no orchestration framework. A note carries when its plan
began to read: a note begun earlier than the one recorded (a driver tick that
read before ``train`` saw the experiment done) never replaces it. With the
daemon stopped, the note is the last view, and says when it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rl_assets.stores.database import Database


@dataclass(frozen=True)
class ProgressNote:
    line: str
    done: bool
    observed_at: datetime


class ProgressNotes:
    def __init__(self, db: Database) -> None:
        self.db = db

    def note(self, experiment: str, rubric: str, line: str, done: bool, observed_at: float) -> None:
        """Record the line of a plan that began reading at ``observed_at`` (unix time), unless a later one is."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_progress (experiment, rubric, line, done, observed_at) "
                "VALUES (%s, %s, %s, %s, to_timestamp(%s)) ON CONFLICT (experiment, rubric) DO UPDATE "
                "SET line = EXCLUDED.line, done = EXCLUDED.done, observed_at = EXCLUDED.observed_at "
                "WHERE rl_progress.observed_at <= EXCLUDED.observed_at",
                (experiment, rubric, line, done, observed_at),
            )

    def get(self, experiment: str, rubric: str) -> ProgressNote | None:
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT line, done, observed_at FROM rl_progress WHERE experiment = %s AND rubric = %s",
                (experiment, rubric),
            )
            row = cur.fetchone()
            return None if row is None else ProgressNote(*row)
