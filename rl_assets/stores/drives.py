"""Drive requests: the experiments someone asked to train, which the driver sensor drives to done.

``train``, ``rescore``, ``fork``, the launchpad's jobs and the rubric sensor
record one (a re-scoring's rubric is in :mod:`rl_assets.stores.scorings`);
the daemon's driver sensor plans every open request, and closes it once the
experiment and its requested re-scorings are done, so a tick plans only
what is open, however long the history. Asking again reopens it (a repair
after damage, a new re-scoring). An experiment recorded without a request
(by a test, a script) is never launched by anyone.
"""

from __future__ import annotations

from datetime import datetime

from rl_assets.stores.database import Database


class DriveRequests:
    def __init__(self, db: Database) -> None:
        self.db = db

    def request(self, experiment: str, requested_by: str) -> None:
        """Open (or reopen) the experiment's request."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_drives (experiment, requested_by) VALUES (%s, %s) ON CONFLICT (experiment) "
                "DO UPDATE SET requested_by = EXCLUDED.requested_by, requested_at = clock_timestamp(), done_at = NULL",
                (experiment, requested_by),
            )

    def open(self) -> dict[str, datetime]:
        """The open requests, in request order: experiment -> when it was (last) requested."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT experiment, requested_at FROM rl_drives WHERE done_at IS NULL ORDER BY requested_at, experiment"
            )
            return dict(cur.fetchall())

    def requested_at(self, experiment: str) -> datetime | None:
        """When the experiment was last asked for (open or not); ``None`` if never."""
        with self.db.transaction() as cur:
            cur.execute("SELECT requested_at FROM rl_drives WHERE experiment = %s", (experiment,))
            row = cur.fetchone()
            return row[0] if row else None

    def close(self, experiment: str, requested_at: datetime) -> None:
        """Close the request found done, unless it was asked again since (``requested_at`` is what was planned)."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE rl_drives SET done_at = clock_timestamp() "
                "WHERE experiment = %s AND requested_at = %s AND done_at IS NULL",
                (experiment, requested_at),
            )

    def generation(self) -> tuple[int, datetime | None]:
        """Changes whenever a request is opened or reopened: what a waiting sensor tick watches."""
        with self.db.transaction() as cur:
            cur.execute("SELECT count(*), max(requested_at) FROM rl_drives WHERE done_at IS NULL")
            count, latest = cur.fetchone()
            return int(count), latest
