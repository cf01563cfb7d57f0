"""Versioned migrations of the ledger tables (Alembic), run by :class:`~rl_assets.stores.database.Database`.

Dagster keeps its own ``alembic_version`` table in the same database, so ours
is :data:`VERSION_TABLE`. Revisions 1 and 2 are the schema and the added
columns as the pre-Alembic code created them, written idempotently (``IF NOT
EXISTS``): a home that code made, whatever release made it, has no version
table and is brought to head by running them over it. Later revisions may
assume their predecessor ran.

The check of the stamped revision comes first and takes no lock, because an
``ALTER TABLE``, even a no-op one, takes an exclusive lock on its table: run
on every connect it deadlocked with other connections' open transactions
(seen in CI with four concurrent judges).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import sqlalchemy
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from rl_assets.stores.locks import LockKey, LockSpace

VERSION_TABLE = "rl_alembic_version"
SCHEMA_LOCK = LockKey(LockSpace.SCHEMA, 0)
"""Serialises migrations: concurrent ``CREATE ... IF NOT EXISTS`` can still collide on the catalog."""


def _config() -> Config:
    """Built in code, so no ``alembic.ini`` has to ship or be found at runtime."""
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent))
    return config


@cache
def head() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None, "the migrations package has no revisions"
    return head


def current(connection: sqlalchemy.Connection) -> str | None:
    """The revision stamped in the database; None for an empty database and for a pre-Alembic home alike."""
    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()


def upgrade(engine: sqlalchemy.Engine) -> None:
    """Bring the ledger tables to :func:`head`, unless they are there already (checked without a lock)."""
    with engine.connect() as connection:
        if current(connection) == head():
            return
    with engine.begin() as connection:
        space, key = SCHEMA_LOCK.args
        connection.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:space, :key)"), {"space": space, "key": key})
        if current(connection) == head():
            return  # another process migrated while this one waited for the lock
        config = _config()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
