"""Dagster's Postgres run and event-log storages, each holding a connection instead of opening one a call.

dagster-postgres gives every storage call a new connection (SQLAlchemy's ``NullPool``), except in the
webserver, which calls the storages' public ``optimize_for_webserver`` to keep a pool. A run's worker makes
dozens of such calls (its events, tags and materializations) and a driver tick a dozen; each new connection
is a Postgres backend started, on the same two cores as the trials. These are the same storages, pooled the
webserver's way (one connection kept, more opened under concurrency and closed when returned), and named in
``dagster.yaml`` (``run_storage``, ``event_log_storage``), so every process of the home (daemon, code server,
run workers, CLI) uses them, and so does each process that rebuilds the instance from its reference.
The schedule storage (sensor ticks and cursors: a call every few seconds) keeps Dagster's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage
from dagster_postgres.utils import DagsterPostgresException, get_token_provider_from_config, pg_url_from_config

from rl_assets.stores.database import TRANSIENT_DB_ERRORS

OUTAGE_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_DB_ERRORS, DagsterPostgresException)
"""What a lost or restarting Postgres raises through our ledgers or through Dagster's storage: waited out."""

POOL_RECYCLE_S = 3600
"""A kept connection is replaced after an hour, as the webserver's are."""
MAX_OVERFLOW = 8
"""Connections opened beyond the kept one while calls overlap (a process's threads), closed when returned."""
NO_STATEMENT_TIMEOUT = 0
"""The webserver bounds its queries; a worker's writes and the driver's reads must never be cut off."""


def _pooled(storage: Any) -> Any:
    storage.optimize_for_webserver(
        statement_timeout=NO_STATEMENT_TIMEOUT, pool_recycle=POOL_RECYCLE_S, max_overflow=MAX_OVERFLOW
    )
    return storage


def _arguments(inst_data: Any, config_value: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "inst_data": inst_data,
        "postgres_url": pg_url_from_config(config_value),
        "should_autocreate_tables": config_value.get("should_autocreate_tables", True),
        "token_provider": get_token_provider_from_config(config_value),
    }


class PooledPostgresRunStorage(PostgresRunStorage):
    """dagster-postgres's run storage with a connection pool."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> PooledPostgresRunStorage:
        return _pooled(cls(**_arguments(inst_data, config_value)))


class PooledPostgresEventLogStorage(PostgresEventLogStorage):
    """dagster-postgres's event-log storage with a connection pool."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> PooledPostgresEventLogStorage:
        return _pooled(cls(**_arguments(inst_data, config_value)))
