"""World store resource: sealed worlds and per-attempt forks.

Locally, forks are overlays mounted inside the sandbox (``fork_mode="auto"``
picks them where the OS allows, else a plain copy, and says which in the
materialization metadata). On Kubernetes the same seam creates a PVC cloned
from the world's VolumeSnapshot instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import dagster as dg

from rl_assets.sandbox.launcher import isolation
from rl_assets.sandbox.protocol import ForkLayout
from rl_assets.worlds import LocalWorlds


class WorldStoreResource(dg.ConfigurableResource):
    """Builds, seals and forks worlds under ``{home}/worlds`` and ``{home}/forks``."""

    home: str
    fork_mode: Literal["auto", "overlay", "copy"] = "auto"

    @property
    def _worlds(self) -> LocalWorlds:
        return LocalWorlds(Path(self.home) / "worlds", Path(self.home) / "forks")

    def ensure_built(self, world_id: str) -> tuple[str, bool]:
        return self._worlds.ensure_built(world_id)

    def verified_hash(self, world_id: str) -> str:
        return self._worlds.verified_hash(world_id)

    def world_path(self, world_id: str) -> Path:
        return self._worlds.world_dir(world_id)

    def use_overlay(self) -> bool:
        if self.fork_mode == "copy":
            return False
        available = isolation().overlay
        if self.fork_mode == "overlay" and not available:
            raise RuntimeError("fork_mode=overlay, but this machine cannot mount an overlay in a sandbox")
        return available

    @contextmanager
    def fork(self, world_id: str, owner: str, attempt_id: str) -> Iterator[ForkLayout]:
        with self._worlds.fork(world_id, owner, attempt_id, overlay=self.use_overlay()) as layout:
            yield layout
