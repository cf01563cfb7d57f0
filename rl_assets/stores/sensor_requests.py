"""What the driver sensor has requested and the daemon has not created yet.

A sensor does not create runs: it returns run requests, and the daemon
creates them after the tick. So the sensor plans an experiment holding the
experiment's driver lock (shared, :func:`planning_lock`; a CLI driver holds
it exclusively for its life), and records its requests in
``rl_sensor_requests`` in the same transaction, which releases the lock. A
CLI driver that takes the lock afterwards treats a recorded request whose run
does not exist yet as in flight (:func:`pending`) and waits for it instead of
launching the same unit a second time. A request expires after
``PENDING_TTL_S``: by then the daemon has created its run, or it is down, and
a request it submits later is a duplicate the CLI cannot prevent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import psycopg2.extensions

from rl_assets.stores.database import Database
from rl_assets.stores.locks import LockKey

PENDING_TTL_S = 120.0


@contextmanager
def planning_lock(db: Database, lock: LockKey) -> Iterator[psycopg2.extensions.cursor | None]:
    """A cursor in a transaction holding the driver lock shared, or None if a CLI driver holds it.

    Shared, so two ticks (or two daemons) may plan at once (their run keys keep
    them from launching a unit twice), while a CLI driver, which takes it
    exclusively, waits for the tick (see :func:`sensor_is_planning`).
    """
    conn = db.info.connect()
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_xact_lock_shared(%s, %s)", lock.args)
            yield cur if cur.fetchone()[0] else None
    finally:
        conn.close()


def sensor_is_planning(db: Database, lock: LockKey) -> bool:
    """True if only shared holders (sensor ticks) hold the driver lock, i.e. a CLI driver should wait, not give up."""
    conn = db.info.connect()
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock_shared(%s, %s)", lock.args)
            shared = bool(cur.fetchone()[0])
            if shared:
                cur.execute("SELECT pg_advisory_unlock_shared(%s, %s)", lock.args)
        return shared
    finally:
        conn.close()


def record(cur: psycopg2.extensions.cursor, experiment: str, run_keys: Iterable[str]) -> None:
    """Record a tick's requests, in the transaction that holds the planning lock."""
    cur.execute(
        "DELETE FROM rl_sensor_requests WHERE requested_at < now() - make_interval(secs => %s)", (PENDING_TTL_S,)
    )
    for key in run_keys:
        cur.execute(
            "INSERT INTO rl_sensor_requests (experiment, run_key) VALUES (%s, %s) "
            "ON CONFLICT (experiment, run_key) DO UPDATE SET requested_at = now()",
            (experiment, key),
        )


def pending(db: Database, experiment: str, created: Callable[[], set[str]]) -> list[str]:
    """Requests of ``experiment`` younger than the TTL whose run is not among ``created()`` (their run keys)."""
    with db.transaction() as cur:
        cur.execute(
            "SELECT run_key FROM rl_sensor_requests WHERE experiment = %s "
            "AND requested_at > now() - make_interval(secs => %s)",
            (experiment, PENDING_TTL_S),
        )
        keys = [row[0] for row in cur.fetchall()]
    if not keys:
        return []
    existing = created()
    return sorted(k for k in keys if k not in existing)
