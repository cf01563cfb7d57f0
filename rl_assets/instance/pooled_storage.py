"""Dagster's Postgres storages, each keeping its connections instead of opening one a call.

dagster-postgres gives every storage call a new connection (SQLAlchemy's ``NullPool``), except in the
webserver, which calls the storages' public ``optimize_for_webserver`` to keep a pool of one connection,
opening more under concurrency and closing them when returned. A run's worker makes dozens of such calls
(its events, tags and materializations) and a driver tick a dozen; a rollout run's hundreds of trial threads
make them at once, and with one connection kept they opened and closed about ten connections a trial (2,500
Postgres backends started in one 256-trial step, a fifth of the step's CPU on two cores). These are the same
storages with a pool that keeps every connection it opened, up to :data:`CONNECTIONS` (as many as the webserver's
pool opens at most), named in ``dagster.yaml`` (``run_storage``, ``event_log_storage``, ``schedule_storage``), so
every process of the home (daemon, code server, run workers, CLI) uses them, and so does each process that rebuilds
the instance from its reference. The schedule storage (sensor ticks and cursors, daemon heartbeats: a call or two a
second while the driver's sensors long-poll) is pooled the same way.

Dagster also asks the catalog, on most writes, whether a table or a column of its schema exists (``has_table``,
``has_asset_key_col``, ``has_run_stats_index_cols``, ``_has_instigators_table``...): about twenty catalog queries a
trial, uncached, and one on each read or write of a sensor's state. These
storages remember each check that answered yes (a migration adds tables and columns, never drops them, so a yes
stays true for the life of the process); a no is asked again, so a ``dagster instance migrate`` while the home
runs is seen as before.

The pool replaces the storage's ``_engine``, the one attribute dagster-postgres makes its connections from
(its own ``optimize_for_webserver`` does the same); ``tests/test_instance_config.py`` checks that it is used.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage
from dagster_postgres.utils import (
    DagsterPostgresException,
    create_pg_engine,
    get_token_provider_from_config,
    pg_url_from_config,
)

from rl_assets.stores.database import TRANSIENT_DB_ERRORS

OUTAGE_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_DB_ERRORS, DagsterPostgresException)
"""What a lost or restarting Postgres raises through our ledgers or through Dagster's storage: waited out."""

POOL_RECYCLE_S = 3600
"""A kept connection is replaced after an hour, as the webserver's are."""
CONNECTIONS = 9
"""Connections a process's storage opens at most while its threads' calls overlap, each kept once opened (a
process that never overlaps keeps one). The webserver's statement timeout is not set: a worker's writes and the
driver's reads must never be cut off."""


def _pooled(storage: Any, arguments: Mapping[str, Any]) -> Any:
    storage._engine = create_pg_engine(
        arguments["postgres_url"],
        arguments["token_provider"],
        isolation_level="AUTOCOMMIT",
        pool_size=CONNECTIONS,
        max_overflow=0,
        pool_recycle=POOL_RECYCLE_S,
    )
    return storage


def _arguments(inst_data: Any, config_value: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "inst_data": inst_data,
        "postgres_url": pg_url_from_config(config_value),
        "should_autocreate_tables": config_value.get("should_autocreate_tables", True),
        "token_provider": get_token_provider_from_config(config_value),
    }


class _SchemaChecks:
    """The yes answers of a storage's schema checks, asked once each."""

    def __init__(self) -> None:
        self._yes: set[tuple[str, ...]] = set()
        self._mutex = threading.Lock()

    def ask(self, key: tuple[str, ...], check: Callable[[], bool]) -> bool:
        if key in self._yes:
            return True
        answer = check()
        if answer:
            with self._mutex:
                self._yes.add(key)
        return answer


class PooledPostgresRunStorage(PostgresRunStorage):
    """dagster-postgres's run storage with a connection pool and its schema checks' yes answers kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._schema = _SchemaChecks()  # before Dagster's own set-up, which checks columns already
        super().__init__(*args, **kwargs)

    def has_run_stats_index_cols(self) -> bool:
        return self._schema.ask(("run_stats_index_cols",), super().has_run_stats_index_cols)

    def has_backfill_id_column(self) -> bool:
        return self._schema.ask(("backfill_id_column",), super().has_backfill_id_column)

    def has_bulk_actions_selector_cols(self) -> bool:
        return self._schema.ask(("bulk_actions_selector_cols",), super().has_bulk_actions_selector_cols)

    def has_bulk_action_job_name_column(self) -> bool:
        return self._schema.ask(("bulk_action_job_name_column",), super().has_bulk_action_job_name_column)

    def has_backfill_tags_table(self) -> bool:
        return self._schema.ask(("backfill_tags_table",), super().has_backfill_tags_table)

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> PooledPostgresRunStorage:
        arguments = _arguments(inst_data, config_value)
        return _pooled(cls(**arguments), arguments)


class PooledPostgresEventLogStorage(PostgresEventLogStorage):
    """dagster-postgres's event-log storage with a connection pool and its schema checks' yes answers kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._schema = _SchemaChecks()  # before Dagster's own set-up, which checks tables already
        super().__init__(*args, **kwargs)

    def has_table(self, table_name: str) -> bool:
        return self._schema.ask(
            ("table", table_name), lambda: super(PooledPostgresEventLogStorage, self).has_table(table_name)
        )

    def has_asset_key_col(self, column_name: str) -> bool:
        return self._schema.ask(
            ("asset_key_col", column_name),
            lambda: super(PooledPostgresEventLogStorage, self).has_asset_key_col(column_name),
        )

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> PooledPostgresEventLogStorage:
        arguments = _arguments(inst_data, config_value)
        return _pooled(cls(**arguments), arguments)


class PooledPostgresScheduleStorage(PostgresScheduleStorage):
    """dagster-postgres's schedule storage with a connection pool and its table checks' yes answers kept.

    Dagster lists every table of the database (``get_table_names``, a catalog join) on each read or write of a
    sensor's state: the driver's sensors, long-polling, made it about eleven times a second during a step.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._schema = _SchemaChecks()
        super().__init__(*args, **kwargs)

    def _has_instigators_table(self, conn: Any) -> bool:
        return self._schema.ask(
            ("table", "instigators"), lambda: super(PooledPostgresScheduleStorage, self)._has_instigators_table(conn)
        )

    def _has_asset_daemon_asset_evaluations_table(self, conn: Any) -> bool:
        return self._schema.ask(
            ("table", "asset_daemon_asset_evaluations"),
            lambda: super(PooledPostgresScheduleStorage, self)._has_asset_daemon_asset_evaluations_table(conn),
        )

    def has_secondary_index_table(self) -> bool:
        return self._schema.ask(("table", "secondary_indexes"), super().has_secondary_index_table)

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> PooledPostgresScheduleStorage:
        arguments = _arguments(inst_data, config_value)
        return _pooled(cls(**arguments), arguments)
