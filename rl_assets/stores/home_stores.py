"""Every store of one home, opened over one database: what commands, assets and the driver read and write.

Free of Dagster (the resource that opens it in a run is :class:`rl_assets.resources.stores.StoresResource`),
so a command that reads only the ledgers (``status``) loads no orchestration framework.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from rl_assets.stores.artifacts import ArtifactStore
from rl_assets.stores.attempts import AttemptLog
from rl_assets.stores.damage import DamageLog
from rl_assets.stores.database import Database
from rl_assets.stores.drives import DriveRequests
from rl_assets.stores.experiments import ExperimentStore, PinnedExperiments
from rl_assets.stores.model_calls import ModelCallLedger
from rl_assets.stores.progress import ProgressNotes
from rl_assets.stores.rubrics import RubricRegistry
from rl_assets.stores.scorings import ScoringRequests
from rl_assets.stores.training import CheckpointStore, TrainingLedger
from rl_assets.stores.trials import TrialRecords
from rl_assets.stores.verdicts import VerdictLedger


class Stores:
    """Every store of one home, sharing one database (a small connection pool, see :class:`Database`)."""

    def __init__(self, home: Path, db: Database, *, pinned: bool = False) -> None:
        self.home = home
        self.db = db
        self._pinned = pinned

    @cached_property
    def artifacts(self) -> ArtifactStore:
        return ArtifactStore(self.home / "artifacts")

    @cached_property
    def experiments(self) -> ExperimentStore:
        return PinnedExperiments(self.db) if self._pinned else ExperimentStore(self.db)

    def pinned(self) -> Stores:
        """These stores as one run sees them: experiment records read once (:class:`PinnedExperiments`)."""
        return Stores(self.home, self.db, pinned=True)

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
    def progress(self) -> ProgressNotes:
        return ProgressNotes(self.db)

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
