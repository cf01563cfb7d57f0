"""The home directory: the one place that holds all of an installation's state.

``--home DIR``, else ``$RL_ASSETS_HOME``, else ``.rl-assets/`` in the working
directory. Inside: the embedded Postgres data (Dagster's instance and the
ledgers), the Dagster home, artifacts (trajectories, rewards, checkpoints),
sealed worlds, per-attempt forks, and the addresses of the background
services. Deleting the directory (after ``rl-assets stop``) removes everything.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

HOME_ENV = "RL_ASSETS_HOME"
DEFAULT_HOME = ".rl-assets"


@dataclass(frozen=True)
class Home:
    """Paths inside one home directory."""

    root: Path

    @classmethod
    def resolve(cls, home: str | os.PathLike[str] | None = None) -> Home:
        """The home from an explicit path, the environment, or the default."""
        chosen = home or os.environ.get(HOME_ENV) or DEFAULT_HOME
        return cls(Path(chosen).expanduser().resolve())

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def worlds(self) -> Path:
        return self.root / "worlds"

    @property
    def rubrics(self) -> Path:
        """User rubrics, one ``<name>.json`` each, beside the built-in ones."""
        return self.root / "rubrics"

    @property
    def forks(self) -> Path:
        return self.root / "forks"

    @property
    def postgres_data(self) -> Path:
        return self.root / "postgres"

    @property
    def services(self) -> Path:
        """Small files recording the running services (ports, addresses, pids)."""
        return self.root / "services"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def runtime(self) -> Path:
        """A short path for unix sockets (Postgres, Ray), which cap path length."""
        tag = hashlib.sha256(str(self.root).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"rla-{tag}"

    def ensure(self) -> Home:
        for path in (self.dagster_home, self.artifacts, self.worlds, self.forks, self.services, self.logs):
            path.mkdir(parents=True, exist_ok=True)
        self.runtime.mkdir(parents=True, exist_ok=True)
        return self
