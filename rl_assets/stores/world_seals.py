"""World seals: the content hash and VolumeSnapshot of each world built on Kubernetes.

Build pods share no filesystem, so the seal (and the lock that makes two
concurrent builds of one world build it once) lives in Postgres.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rl_assets.stores.database import Database
from rl_assets.stores.locks import LockSpace, hashed, xact_lock


class WorldSeals:
    def __init__(self, db: Database) -> None:
        self.db = db

    @contextmanager
    def building(self, world_id: str) -> Iterator[None]:
        """Hold the world's build lock for the block: a transaction-level lock, released with the transaction.

        A build pod that dies ends its transaction with its connection, and the lock with it.
        """
        with self.db.transaction() as cur:
            xact_lock(cur, hashed(LockSpace.WORLD_BUILD, world_id))
            yield

    def get(self, world_id: str) -> str | None:
        """The sealed content hash of the world, or None if it was never sealed."""
        with self.db.transaction() as cur:
            cur.execute("SELECT content_hash FROM rl_world_seals WHERE world_id = %s", (world_id,))
            row = cur.fetchone()
        return None if row is None else str(row[0])

    def record(self, world_id: str, content_hash: str, snapshot: str) -> None:
        """Seal the world; the first seal stands (a snapshot is immutable, so a later one is the same world)."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_world_seals (world_id, content_hash, snapshot) VALUES (%s, %s, %s) "
                "ON CONFLICT (world_id) DO NOTHING",
                (world_id, content_hash, snapshot),
            )
