"""The experiment registry: desired state, recorded once.

Creating an experiment that exists with the same config is a no-op (that is
how ``train`` resumes); with a different config it is refused, because mixing
two configs under one name would silently corrupt both results.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import Runtime
from rl_assets.stores.database import Database


class ExperimentConflictError(ValueError):
    """The experiment exists with a different configuration."""


class UnknownExperimentError(KeyError):
    """No experiment of that name has been created in this home."""

    def __str__(self) -> str:
        return f"no experiment named {self.args[0]!r} in this home (start it with `rl-assets train`)"


class ExperimentStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create_or_resume(self, config: ExperimentConfig, runtime: Runtime, forked_from: str | None = None) -> bool:
        """Record ``config``; True if new. Refuses a changed identity (or parent); updates the runtime and the
        deployment's fields (:data:`~rl_assets.domain.experiment.DEPLOYMENT_FIELDS`).

        ``forked_from`` names the experiment whose rollouts this one may reuse
        when their identity matches (see the ``trajectories`` asset).
        """
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_experiments (name, config, config_hash, faults, forked_from) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (name) DO NOTHING RETURNING name",
                (config.name, config.model_dump_json(), config.config_hash, runtime.model_dump_json(), forked_from),
            )
            created = cur.fetchone() is not None
            if not created:
                cur.execute("SELECT config, forked_from FROM rl_experiments WHERE name = %s FOR UPDATE", (config.name,))
                stored, parent = cur.fetchone()
                existing = ExperimentConfig.model_validate(stored)
                if existing.identity_hash != config.identity_hash:
                    raise ExperimentConflictError(_describe_conflict(existing, config))
                if parent != forked_from:
                    was = f"a fork of {parent!r}" if parent else "not a fork"
                    raise ExperimentConflictError(f"experiment {config.name!r} already exists and is {was}")
                # The deployment's fields (a server's URL, a key's name) may have moved: the config takes them.
                cur.execute(
                    "UPDATE rl_experiments SET faults = %s, config = %s, config_hash = %s WHERE name = %s",
                    (runtime.model_dump_json(), config.model_dump_json(), config.config_hash, config.name),
                )
        return created

    def _column(self, name: str, column: str) -> object:
        with self.db.transaction() as cur:
            cur.execute(f"SELECT {column} FROM rl_experiments WHERE name = %s", (name,))
            row = cur.fetchone()
        if row is None:
            raise UnknownExperimentError(name)
        return row[0]

    def get(self, name: str) -> ExperimentConfig:
        return ExperimentConfig.model_validate(self._column(name, "config"))

    def runtime(self, name: str) -> Runtime:
        return Runtime.model_validate(self._column(name, "faults"))

    def ancestors(self, name: str) -> list[str]:
        """The experiments ``name`` was forked from, nearest first."""
        chain: list[str] = []
        parent = self._column(name, "forked_from")
        while parent is not None and parent not in chain:
            chain.append(str(parent))
            parent = self._column(str(parent), "forked_from")
        return chain

    def names(self) -> list[str]:
        with self.db.transaction() as cur:
            cur.execute("SELECT name FROM rl_experiments ORDER BY created_at, name")
            return [r[0] for r in cur.fetchall()]


class PinnedExperiments(ExperimentStore):
    """The registry as one run sees it: each experiment's config, runtime and fork chain read once.

    A rollout run's hundreds of trials all ask for their experiment's records; the config and the chain never
    change, and the runtime a run uses is the one it began with, as a run of one trial reads it once. The
    trials are threads: a record is read under a lock the first time, and served without one after.
    """

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._lock = threading.Lock()
        self._read: dict[tuple[str, str], Any] = {}

    def _once(self, what: str, name: str, read: Callable[[str], Any]) -> Any:
        key = (what, name)
        if key not in self._read:
            with self._lock:
                if key not in self._read:
                    self._read[key] = read(name)
        return self._read[key]

    def get(self, name: str) -> ExperimentConfig:
        return self._once("config", name, super().get)

    def runtime(self, name: str) -> Runtime:
        return self._once("runtime", name, super().runtime)

    def ancestors(self, name: str) -> list[str]:
        return list(self._once("ancestors", name, super().ancestors))


def _describe_conflict(existing: ExperimentConfig, wanted: ExperimentConfig) -> str:
    old, new = existing.model_dump(mode="json"), wanted.model_dump(mode="json")  # an unset task field is absent
    keys = [*old, *(k for k in new if k not in old)]
    changes = ", ".join(
        f"{k}: {json.dumps(old.get(k))} -> {json.dumps(new.get(k))}" for k in keys if old.get(k) != new.get(k)
    )
    return (
        f"experiment {existing.name!r} already exists with a different configuration ({changes}); "
        "use a new --experiment name"
    )
