"""Postgres advisory locks, one namespace per purpose.

Every lock rl-assets takes is a two-int advisory lock ``(space, key)``: the
first int names the purpose (:class:`LockSpace`), so a verdict lock can never
be taken for a driver lock, whatever the keys. (Postgres keeps the two-int and
the single-bigint key spaces apart, so other users of single-key locks cannot
collide with these either.)

Keys within a space:

- ``DRIVER``: the experiment's ``lock_key``, a serial id from
  ``rl_experiments``; two experiments never share it, so no experiment's
  driver can be refused because of another's (a 32-bit hash of the name
  could collide and would).
- ``VERDICT``, ``JUDGE_RATE``, ``TRAIN_STEP`` and ``WORLD_BUILD``: a 32-bit hash of the verdict key or judge
  id. Two keys may collide; a collision only makes their holders take turns,
  which costs time and never correctness.
- ``SCHEMA``: a single lock serialising migrations (see :mod:`rl_assets.stores.migrations`).

A session-level lock lives as long as its connection. When Postgres restarts,
every such lock is gone; :class:`SessionLock` therefore holds its lock on a
connection of its own, can check and re-take it (:meth:`SessionLock.hold`),
and treats releasing a lock whose connection is already gone as done: a
connection that no longer exists holds nothing, so the step that released it
must not fail for it.
"""

from __future__ import annotations

import math
import threading
import zlib
from dataclasses import dataclass
from enum import IntEnum

import psycopg2
import psycopg2.extensions

from rl_assets.domain.waiting import Waiting
from rl_assets.home.services.postgres import PostgresInfo

LOST_CONNECTION = (psycopg2.OperationalError, psycopg2.InterfaceError)
POLL_S = 0.05


class LockSpace(IntEnum):
    """The purpose of a lock: its first key. ``rl`` in the high bytes keeps clear of other users' small ints."""

    SCHEMA = 0x726C0001
    DRIVER = 0x726C0002
    VERDICT = 0x726C0003
    JUDGE_RATE = 0x726C0004
    TRAIN_STEP = 0x726C0005
    WORLD_BUILD = 0x726C0006


@dataclass(frozen=True)
class LockKey:
    space: LockSpace
    key: int
    """A signed 32-bit int, as ``pg_advisory_lock(int, int)`` takes it."""

    def __post_init__(self) -> None:
        if not -(2**31) <= self.key < 2**31:
            raise ValueError(f"an advisory lock key is a 32-bit int, not {self.key}")

    @property
    def args(self) -> tuple[int, int]:
        return int(self.space), self.key


def hashed(space: LockSpace, name: str) -> LockKey:
    """A lock keyed by a 32-bit hash of ``name``: only for purposes where a collision merely serialises."""
    digest = zlib.crc32(name.encode())
    return LockKey(space, digest - 2**32 if digest >= 2**31 else digest)


def try_lock(cur: psycopg2.extensions.cursor, lock: LockKey) -> bool:
    """Take a session-level lock on ``cur``'s connection if it is free."""
    cur.execute("SELECT pg_try_advisory_lock(%s, %s)", lock.args)
    return bool(cur.fetchone()[0])


def unlock(cur: psycopg2.extensions.cursor, lock: LockKey) -> bool:
    """Release a session-level lock taken on ``cur``'s connection."""
    cur.execute("SELECT pg_advisory_unlock(%s, %s)", lock.args)
    return bool(cur.fetchone()[0])


def xact_lock(cur: psycopg2.extensions.cursor, lock: LockKey) -> None:
    """Wait for a lock held until ``cur``'s transaction ends: a lost connection aborts the transaction with it."""
    cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock.args)


def is_held(cur: psycopg2.extensions.cursor, lock: LockKey) -> bool:
    """Whether any session holds ``lock``, without taking it (``pg_locks`` shows both ints as unsigned oids)."""
    space, key = lock.args
    cur.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND classid = %s::bigint::oid AND objid = %s::bigint::oid)",
        (space, key % 2**32),
    )
    return bool(cur.fetchone()[0])


def driver_lock(cur: psycopg2.extensions.cursor, experiment: str) -> LockKey:
    """The lock a driver of ``experiment`` holds for its life; KeyError if there is no such experiment."""
    cur.execute("SELECT lock_key FROM rl_experiments WHERE name = %s", (experiment,))
    row = cur.fetchone()
    if row is None:
        raise KeyError(experiment)
    return LockKey(LockSpace.DRIVER, int(row[0]))


class IdleConnections:
    """Connections kept open between session locks.

    A verdict lock is taken for every paid judge call, and opening a
    connection for each costs several times the rest of the call's
    bookkeeping. A connection comes back only after its lock was released, so
    an idle one holds nothing; one that a restart dropped is found out on use.
    It keeps as many as the judge pool's default limit lets calls run at once
    (``pools.default_limit`` in dagster.yaml): a rollout run's trials judge
    that many at a time.
    """

    def __init__(self, info: PostgresInfo, keep: int = 16) -> None:
        self.info = info
        self.keep = keep
        self._idle: list[psycopg2.extensions.connection] = []
        self._mutex = threading.Lock()  # a timed-out call's thread gives its connection back

    def connect(self) -> psycopg2.extensions.connection:
        conn = self.info.connect("locks")
        conn.autocommit = True
        return conn

    def take(self) -> psycopg2.extensions.connection:
        with self._mutex:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
        return self.connect()

    def give(self, conn: psycopg2.extensions.connection) -> None:
        with self._mutex:
            if not conn.closed and len(self._idle) < self.keep:
                self._idle.append(conn)
                return
        conn.close()


class SessionLock:
    """A session-level lock on a connection of its own, so that it outlives any one transaction.

    Only one thread may use an instance at a time, but it may be handed from
    one thread to another: a timed-out judge call's lock passes to the thread
    that records the late answer.
    """

    def __init__(self, info: PostgresInfo, lock: LockKey, connections: IdleConnections | None = None) -> None:
        self.lock = lock
        self._connections = connections or IdleConnections(info, keep=0)
        self._conn: psycopg2.extensions.connection | None = None
        self._held = False

    def _try(self) -> bool:
        if self._conn is None or self._conn.closed:
            self._conn = self._connections.take()
        try:
            with self._conn.cursor() as cur:
                self._held = try_lock(cur, self.lock)
        except LOST_CONNECTION:  # an idle connection that a restart dropped: once more, on a new one
            self.close()
            self._conn = self._connections.connect()
            with self._conn.cursor() as cur:
                self._held = try_lock(cur, self.lock)
        return self._held

    def acquire(self, wait_s: float | None = None) -> bool:
        """Take the lock, waiting for it at most ``wait_s`` (None: for as long as it takes)."""
        # polling the lock with a deadline; a blocking wait could not be bounded per call
        deadline = Waiting(timeout_s=math.inf if wait_s is None else wait_s, interval_s=POLL_S).deadline()
        while not self._try():
            if deadline.expired():
                self.close()
                return False
            deadline.sleep()
        return True

    def hold(self) -> bool:
        """Whether the lock is still ours; after a lost connection it is taken again, False if another took it."""
        if self._held and self._conn is not None and not self._conn.closed:
            try:
                with self._conn.cursor() as cur:
                    cur.execute("SELECT 1")
                return True
            except LOST_CONNECTION:
                self.close()
        try:
            return self._try()
        except LOST_CONNECTION:
            self.close()
            raise

    def release(self) -> None:
        """Give the lock up; if its connection is already gone, so is the lock, and that is not an error."""
        conn, self._conn = self._conn, None
        self._held = False
        if conn is None or conn.closed:
            return
        try:
            with conn.cursor() as cur:
                released = unlock(cur, self.lock)
        except LOST_CONNECTION:  # the server dropped the connection (a restart): it released the lock when it did
            conn.close()
            return
        if released:
            self._connections.give(conn)  # it holds nothing now
        else:
            conn.close()

    def close(self) -> None:
        """Close the connection, and with it the lock if it was held."""
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None
        self._held = False
