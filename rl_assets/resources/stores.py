"""The home's durable state as one resource, opened lazily per step process."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from rl_assets.stores.database import Database
from rl_assets.stores.home_stores import Stores


class StoresResource(dg.ConfigurableResource):
    """Where the home's ledgers (Postgres, from ``DAGSTER_PG_*``) and artifacts live."""

    home: str

    _stores: Stores | None = PrivateAttr(default=None)

    @property
    def stores(self) -> Stores:
        if self._stores is None:
            self._stores = Stores(Path(self.home), Database.from_env())
        return self._stores

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._stores is not None:
            self._stores.db.close()
