"""Re-scoring requests: (experiment, rubric) pairs to judge and train besides the experiment's own rubric.

A request is recorded once (the primary key makes a repeat a no-op), by the
CLI, the launchpad or the rubric sensor; the driver sensor drives every
request until its plan is done, and the records of each rubric stay side by
side (rewards, verdicts and checkpoints are all keyed by rubric).
"""

from __future__ import annotations

from rl_assets.stores.database import Database


class ScoringRequests:
    def __init__(self, db: Database) -> None:
        self.db = db

    def request(self, experiment: str, rubric: str, requested_by: str) -> bool:
        """Record the request; True if it is new."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_scorings (experiment, rubric, requested_by) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING RETURNING rubric",
                (experiment, rubric, requested_by),
            )
            return cur.fetchone() is not None

    def requested(self, experiment: str) -> list[str]:
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT rubric FROM rl_scorings WHERE experiment = %s ORDER BY requested_at, rubric", (experiment,)
            )
            return [row[0] for row in cur.fetchall()]
