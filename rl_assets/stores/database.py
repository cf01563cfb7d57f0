"""The ledger database: rl-assets' own tables beside Dagster's, in one Postgres.

Keeping the ledgers in the same database as Dagster's event log means one
backup, one failure domain, and row locks that every process (driver, step
workers, the CLI) shares. The tables are migrated to the current revision
once per process, on first use (see :mod:`rl_assets.stores.migrations`).

Transactions run on a small pool of connections (SQLAlchemy, checked with a
ping on checkout, so a connection a restarted server dropped is replaced
instead of failing the next transaction). Session-level advisory locks never
use this pool: a pooled connection given back while holding one would hand
the lock to whoever takes it next, so :class:`~rl_assets.stores.locks.SessionLock`
and the other holders of a lock that outlives a transaction open connections
of their own (``Database.info.connect()``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2
import psycopg2.extensions
import sqlalchemy
import sqlalchemy.exc

from rl_assets.domain.waiting import Waiting
from rl_assets.home.services.postgres import PostgresInfo
from rl_assets.stores import migrations

RECONNECTING = Waiting(timeout_s=120.0, interval_s=0.5)
"""How the stores wait out a restarting Postgres: its refusals, retried every half second for two minutes."""
POOL_SIZE = 8
"""Connections a process opens at most, each kept once opened: a step uses one at a time, a rollout run's hundreds
of trial threads all of them. None is closed when returned: with two kept and six more opened and closed on demand,
a 256-trial rollout run started hundreds of Postgres backends."""
POOL_WAIT_S = 600.0
"""How long a thread waits for a pooled connection. SQLAlchemy's default (30 s) failed 516 trial attempts of one
1024-trial rollout run on two cores, outwaited by the other threads: a trial's own deadline bounds its wait instead."""

TRANSIENT_DB_ERRORS: tuple[type[BaseException], ...] = (
    psycopg2.OperationalError,
    psycopg2.InterfaceError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
)
"""What a lost or restarting Postgres raises through our ledgers (through Dagster's storage as well:
:data:`rl_assets.instance.pooled_storage.OUTAGE_ERRORS`)."""

_migrated: set[PostgresInfo] = set()
_migrating = threading.Lock()


class Database:
    """A lazily created connection pool to the ledger tables."""

    def __init__(self, info: PostgresInfo) -> None:
        self.info = info
        self._engine: sqlalchemy.Engine | None = None
        self._pid = 0
        self._mutex = threading.Lock()

    @classmethod
    def from_env(cls) -> Database:
        return cls(PostgresInfo.from_env())

    def _pool(self) -> sqlalchemy.Engine:
        with self._mutex:
            if self._engine is not None and self._pid != os.getpid():
                self._engine.dispose(close=False)  # a forked child: the parent's connections are the parent's
                self._engine = None
            if self._engine is None:
                self._engine = sqlalchemy.create_engine(
                    "postgresql+psycopg2://",
                    creator=self.info.connect,
                    pool_size=POOL_SIZE,
                    max_overflow=0,
                    pool_timeout=POOL_WAIT_S,
                    pool_pre_ping=True,
                )
                self._pid = os.getpid()
            engine = self._engine
        with _migrating:
            if self.info not in _migrated:
                migrations.upgrade(engine)
                _migrated.add(self.info)
        return engine

    def _checkout(self) -> sqlalchemy.PoolProxiedConnection:
        """A pooled connection; while the server is restarting, waits for it to accept connections."""
        refusals = (psycopg2.OperationalError, sqlalchemy.exc.OperationalError)  # the pool's, and the migration's
        return RECONNECTING.retrying(lambda: self._pool().raw_connection(), refusals)

    @contextmanager
    def transaction(self) -> Iterator[psycopg2.extensions.cursor]:
        """A cursor in one transaction, committed on success, rolled back on error; its connection is pooled again."""
        conn = self._checkout()
        try:
            with conn.cursor() as cur:
                yield cur
            conn.commit()
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            conn.invalidate()  # lost with the server: never back into the pool
            raise
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    def scalar(self, sql: str, params: tuple = ()) -> object:
        with self.transaction() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        """Close the pool's connections; the next transaction opens a new pool."""
        with self._mutex:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose(close=self._pid == os.getpid())
