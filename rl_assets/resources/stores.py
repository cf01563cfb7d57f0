"""The home's durable state as one resource, opened lazily per step process."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from rl_assets.stores.artifacts import ArtifactStore
from rl_assets.stores.attempts import AttemptLog
from rl_assets.stores.damage import DamageLog
from rl_assets.stores.database import Database
from rl_assets.stores.drives import DriveRequests
from rl_assets.stores.experiments import ExperimentStore
from rl_assets.stores.model_calls import ModelCallLedger
from rl_assets.stores.rubrics import RubricRegistry
from rl_assets.stores.scorings import ScoringRequests
from rl_assets.stores.training import CheckpointStore, TrainingLedger
from rl_assets.stores.trials import TrialRecords
from rl_assets.stores.verdicts import VerdictLedger


class Stores:
    """Every store of one home, sharing one database (a small connection pool, see :class:`Database`)."""

    def __init__(self, home: Path, db: Database) -> None:
        self.home = home
        self.db = db

    @cached_property
    def artifacts(self) -> ArtifactStore:
        return ArtifactStore(self.home / "artifacts")

    @cached_property
    def experiments(self) -> ExperimentStore:
        return ExperimentStore(self.db)

    @cached_property
    def attempts(self) -> AttemptLog:
        return AttemptLog(self.db)

    @cached_property
    def damage(self) -> DamageLog:
        return DamageLog(self.db)

    @cached_property
    def model_calls(self) -> ModelCallLedger:
        return ModelCallLedger(self.db)

    @cached_property
    def verdicts(self) -> VerdictLedger:
        return VerdictLedger(self.db)

    @cached_property
    def rubrics(self) -> RubricRegistry:
        return RubricRegistry(self.home / "rubrics", self.db)

    @cached_property
    def drives(self) -> DriveRequests:
        return DriveRequests(self.db)

    @cached_property
    def scorings(self) -> ScoringRequests:
        return ScoringRequests(self.db)

    @cached_property
    def training(self) -> TrainingLedger:
        return TrainingLedger(self.db)

    @cached_property
    def checkpoints(self) -> CheckpointStore:
        return CheckpointStore(self.artifacts)

    @cached_property
    def trials(self) -> TrialRecords:
        return TrialRecords(self.artifacts)


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
