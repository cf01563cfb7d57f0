"""The home's durable state as one resource, opened lazily, once per process and home."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from rl_assets.home.services.postgres import PostgresInfo
from rl_assets.stores.database import Database
from rl_assets.stores.home_stores import Stores

_opened: dict[tuple[str, PostgresInfo, int], Stores] = {}
_opening = threading.Lock()


def _stores_of(home: str, info: PostgresInfo) -> Stores:
    """The process's one set of stores for ``home``, and with it one connection pool.

    Dagster builds a sensor's resources anew for every tick (the code server's ticks come every few seconds):
    stores opened and closed a tick started a Postgres backend or two each time. A run's worker opens them once
    either way; its pool closes with the process.
    """
    key = (home, info, os.getpid())
    with _opening:
        if key not in _opened:
            _opened[key] = Stores(Path(home), Database(info))
        return _opened[key]


class StoresResource(dg.ConfigurableResource):
    """Where the home's ledgers (Postgres, from ``DAGSTER_PG_*``) and artifacts live."""

    home: str

    _stores: Stores | None = PrivateAttr(default=None)

    @property
    def stores(self) -> Stores:
        if self._stores is None:
            self._stores = _stores_of(self.home, PostgresInfo.from_env())
        return self._stores
