"""The damage log: durable records found damaged, and their repair.

A checksum mismatch, a missing record or a modified world is written here as
an *open* damage on the unit that produced it (a world, a trial, a step). The
planner treats a unit with open damage as not done, so the driver launches it
again; the unit's asset closes the damage when it has rematerialized. Because
every unit is idempotent (rollout cache, verdict ledger, training ledger), a
repair rebuilds the record without redoing work that is still intact, and the
log keeps what was found, when, and when it was repaired.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from rl_assets.stores.database import Database

DamageKind = Literal["world", "trial", "step"]


@dataclass(frozen=True)
class Damage:
    kind: DamageKind
    partition_key: str
    detail: str
    detected_at: datetime | None = None
    repaired_at: datetime | None = None


class DamageLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    def report(self, kind: DamageKind, partition_key: str, detail: str) -> bool:
        """Open a damage on the unit unless one is open; True if this call opened it."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_damage (kind, partition_key, detail) VALUES (%s, %s, %s) "
                "ON CONFLICT (kind, partition_key) WHERE repaired_at IS NULL DO NOTHING RETURNING id",
                (kind, partition_key, detail),
            )
            return cur.fetchone() is not None

    def open_keys(self, kind: DamageKind) -> set[str]:
        with self.db.transaction() as cur:
            cur.execute("SELECT partition_key FROM rl_damage WHERE kind = %s AND repaired_at IS NULL", (kind,))
            return {row[0] for row in cur.fetchall()}

    def repaired(self, kind: DamageKind, partition_key: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE rl_damage SET repaired_at = now() "
                "WHERE kind = %s AND partition_key = %s AND repaired_at IS NULL",
                (kind, partition_key),
            )

    def history(self, partition_prefix: str, world_ids: list[str]) -> list[Damage]:
        """Damage of an experiment's units (partition keys under its prefix) and of its worlds."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT kind, partition_key, detail, detected_at, repaired_at FROM rl_damage "
                "WHERE partition_key LIKE %s OR (kind = 'world' AND partition_key = ANY(%s)) ORDER BY id",
                (partition_prefix.replace("_", r"\_") + "%", world_ids),
            )
            return [Damage(*row) for row in cur.fetchall()]
