"""The ledger database: rl-assets' own tables beside Dagster's, in one Postgres.

Keeping the ledgers in the same database as Dagster's event log means one
backup, one failure domain, and row locks that every process (driver, step
workers, the CLI) shares. Tables are created on first connection.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2
import psycopg2.extensions
import sqlalchemy.exc
from dagster_postgres.utils import DagsterPostgresException

from rl_assets.services.postgres import PostgresInfo

SCHEMA = """
CREATE TABLE IF NOT EXISTS rl_experiments (
    name TEXT PRIMARY KEY,
    config JSONB NOT NULL,
    config_hash TEXT NOT NULL,
    faults JSONB NOT NULL DEFAULT '{}',
    forked_from TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_generation_attempts (
    id BIGSERIAL PRIMARY KEY,
    experiment TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    attempt INT NOT NULL,
    identity TEXT NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    fork_kind TEXT,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS rl_verdicts (
    verdict_key TEXT PRIMARY KEY,
    verdict JSONB NOT NULL,
    content_hash TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_judge_calls (
    id BIGSERIAL PRIMARY KEY,
    verdict_key TEXT NOT NULL,
    experiment TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    status TEXT NOT NULL,
    cause TEXT,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS rl_judge_attempts (
    id BIGSERIAL PRIMARY KEY,
    experiment TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    attempt INT NOT NULL,
    verdict_key TEXT NOT NULL,
    cache_hit BOOLEAN,
    outcome TEXT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_train_ledger (
    experiment TEXT NOT NULL,
    rubric TEXT NOT NULL,
    step INT NOT NULL,
    identity TEXT NOT NULL,
    parent_hash TEXT NOT NULL,
    policy_hash TEXT NOT NULL,
    version INT NOT NULL,
    actor_pid INT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (experiment, rubric, step)
);
CREATE TABLE IF NOT EXISTS rl_trial_failures (
    experiment TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    error TEXT NOT NULL,
    failed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (experiment, trial_id)
);
CREATE TABLE IF NOT EXISTS rl_damage (
    id BIGSERIAL PRIMARY KEY,
    kind TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    detail TEXT NOT NULL,
    detected_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    repaired_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX IF NOT EXISTS rl_damage_open ON rl_damage (kind, partition_key) WHERE repaired_at IS NULL;
CREATE TABLE IF NOT EXISTS rl_rubrics (
    name TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL,
    rubric JSONB NOT NULL,
    registered_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_scorings (
    experiment TEXT NOT NULL,
    rubric TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (experiment, rubric)
);
CREATE TABLE IF NOT EXISTS rl_sensor_requests (
    experiment TEXT NOT NULL,
    run_key TEXT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (experiment, run_key)
);
CREATE TABLE IF NOT EXISTS rl_world_seals (
    world_id TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    sealed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_judge_rate (
    id BIGSERIAL PRIMARY KEY,
    judge_id TEXT NOT NULL,
    called_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS rl_judge_rate_window ON rl_judge_rate (judge_id, called_at);
CREATE TABLE IF NOT EXISTS rl_driver_attempts (
    id BIGSERIAL PRIMARY KEY,
    experiment TEXT NOT NULL,
    pid INT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""

_SCHEMA_LOCK = 0x726C6173  # advisory lock id serialising CREATE TABLE IF NOT EXISTS
RECONNECT_TIMEOUT_S = 120.0

TRANSIENT_DB_ERRORS: tuple[type[BaseException], ...] = (
    psycopg2.OperationalError,
    psycopg2.InterfaceError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    DagsterPostgresException,
)
"""What a lost or restarting Postgres raises, through our ledgers or through Dagster's storage."""


def _alive(conn: psycopg2.extensions.connection) -> bool:
    if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        return True  # in use by an open transaction of ours; a ping would interleave with it
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
        conn.rollback()
        return True
    except (psycopg2.OperationalError, psycopg2.InterfaceError):
        return False


class Database:
    """A lazily opened connection to the ledger tables."""

    def __init__(self, info: PostgresInfo) -> None:
        self.info = info
        self._conn: psycopg2.extensions.connection | None = None

    @classmethod
    def from_env(cls) -> Database:
        return cls(PostgresInfo.from_env())

    def connection(self) -> psycopg2.extensions.connection:
        """The open connection; a lost one (a restarted server) is replaced, waiting for the server."""
        if self._conn is not None and not self._conn.closed and _alive(self._conn):
            return self._conn
        self.close()
        deadline = time.monotonic() + RECONNECT_TIMEOUT_S
        while True:
            try:
                conn = self.info.connect()
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)  # the server is restarting: poll until it accepts connections
        with conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            cur.execute(SCHEMA)
        self._conn = conn
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg2.extensions.cursor]:
        """A cursor in one transaction, committed on success, rolled back on error."""
        conn = self.connection()
        with conn, conn.cursor() as cur:
            yield cur

    def scalar(self, sql: str, params: tuple = ()) -> object:
        with self.transaction() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None
