"""Drive requests: the experiments someone asked to train, which the driver sensor drives to done.

``train``, ``fork`` and the launchpad's start and fork jobs record one
(re-scorings are requested in :mod:`rl_assets.stores.scorings`); the daemon's
driver sensor plans every requested experiment until its plan is done. An
experiment recorded without a request (by a test, a script) is never
launched by anyone. A repeat request is a no-op.
"""

from __future__ import annotations

from rl_assets.stores.database import Database


class DriveRequests:
    def __init__(self, db: Database) -> None:
        self.db = db

    def request(self, experiment: str, requested_by: str) -> bool:
        """Record the request; True if it is new."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_drives (experiment, requested_by) VALUES (%s, %s) "
                "ON CONFLICT DO NOTHING RETURNING experiment",
                (experiment, requested_by),
            )
            return cur.fetchone() is not None

    def driven(self) -> list[str]:
        """Experiments to drive: those requested, and those with a re-scoring requested, in request order."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT experiment FROM ("
                " SELECT experiment, requested_at FROM rl_drives"
                " UNION ALL SELECT experiment, requested_at FROM rl_scorings"
                ") r GROUP BY experiment ORDER BY min(requested_at), experiment"
            )
            return [row[0] for row in cur.fetchall()]

    def generation(self) -> tuple[int, int]:
        """Changes whenever a drive or a re-scoring is requested: what a waiting sensor tick watches."""
        with self.db.transaction() as cur:
            cur.execute("SELECT (SELECT count(*) FROM rl_drives), (SELECT count(*) FROM rl_scorings)")
            drives, scorings = cur.fetchone()
            return int(drives), int(scorings)
