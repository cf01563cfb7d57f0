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
(seen in CI with four concurrent judges). That check is one query and the
names of the revision files (``NNNN_*.py``, numbered in order); Alembic is
imported only to migrate, so a process that finds the schema current (every
one but the first after an upgrade) does not pay for loading it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy

from rl_assets.stores.locks import LockKey, LockSpace

if TYPE_CHECKING:
    from alembic.config import Config

VERSION_TABLE = "rl_alembic_version"
SCHEMA_LOCK = LockKey(LockSpace.SCHEMA, 0)
"""Serialises migrations: concurrent ``CREATE ... IF NOT EXISTS`` can still collide on the catalog."""


REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")
"""A revision's file: its four-digit number (its ``revision``), then what it does."""


def _config() -> Config:
    """Built in code, so no ``alembic.ini`` has to ship or be found at runtime."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent))
    return config


@cache
def head() -> str:
    """The newest revision: the highest-numbered file (``tests/test_migrations.py`` holds it to Alembic's head)."""
    numbers = [m.group(1) for f in (Path(__file__).parent / "versions").iterdir() if (m := REVISION_FILE.match(f.name))]
    assert numbers, "the migrations package has no revisions"
    return max(numbers)


def current(connection: sqlalchemy.Connection) -> str | None:
    """The revision stamped in the database; None for an empty database and for a pre-Alembic home alike."""
    if connection.execute(sqlalchemy.text("SELECT to_regclass(:t)"), {"t": VERSION_TABLE}).scalar() is None:
        return None
    return connection.execute(sqlalchemy.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


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
        from alembic import command

        config = _config()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
