"""Sealed worlds and their per-attempt forks, on the local filesystem.

A world is built once into ``worlds/<id>/``, made read-only, and its content
hash recorded in ``worlds/<id>.sha256``; every use re-verifies the hash, so a
world modified behind the system's back is detected, never silently used, and
rebuilt (deterministically, to the same hash) by its next materialization.
Each rollout attempt gets its own fork under ``forks/<attempt>/``: an overlay
(upper and work dirs, O(1) in world size) where the sandbox can mount one,
otherwise a plain copy that says it is one. The parent world is never
writable by a trial: overlay writes land in the upper dir, and a copy is a copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rl_assets.domain.world import build_world
from rl_assets.sandbox.protocol import ForkKind, ForkLayout


class WorldTamperedError(RuntimeError):
    """A sealed world's content no longer matches its recorded hash."""


def tree_hash(root: Path) -> str:
    """sha256 over every file's relative path and bytes, in sorted order."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _seal(root: Path) -> None:
    for path in [*root.rglob("*"), root]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


class LocalWorlds:
    """Worlds and forks under one home."""

    def __init__(self, worlds_root: Path, forks_root: Path) -> None:
        self.worlds_root = worlds_root
        self.forks_root = forks_root

    def world_dir(self, world_id: str) -> Path:
        return self.worlds_root / world_id

    def _hash_file(self, world_id: str) -> Path:
        return self.worlds_root / f"{world_id}.sha256"

    def ensure_built(self, world_id: str) -> tuple[str, bool]:
        """Build and seal the world if absent or damaged; returns ``(content hash, built now)``.

        Building is deterministic, so a damaged world is rebuilt and must come
        out with the hash it was recorded with; any other outcome is an error,
        because trials already rolled out in it would no longer match.
        """
        hash_file = self._hash_file(world_id)
        recorded = hash_file.read_text().strip() if hash_file.exists() else None
        if recorded is not None:
            try:
                return self.verified_hash(world_id), False
            except WorldTamperedError:
                pass  # rebuilt below
        staging = self.worlds_root / f".{world_id}.{uuid.uuid4().hex}"
        build_world(world_id, staging)
        digest = tree_hash(staging)
        if recorded is not None and digest != recorded:
            shutil.rmtree(staging)
            raise WorldTamperedError(
                f"world {world_id} rebuilt with hash {digest}, but it was recorded as {recorded}: "
                "the world builder changed under an existing experiment"
            )
        _seal(staging)
        target = self.world_dir(world_id)
        if target.exists():  # a damaged world, or an unsealed leftover of a crashed build
            shutil.rmtree(target, onerror=_force_remove)
        os.replace(staging, target)
        hash_file.write_text(digest)
        return digest, True

    def verified_hash(self, world_id: str) -> str:
        """The sealed world's hash, re-computed and checked against the record."""
        recorded = self._hash_file(world_id).read_text().strip()
        actual = tree_hash(self.world_dir(world_id))
        if actual != recorded:
            raise WorldTamperedError(
                f"world {world_id} was modified after it was sealed (hash {actual}, recorded {recorded}); "
                "`rl-assets train` rebuilds it"
            )
        return recorded

    @contextmanager
    def fork(self, world_id: str, owner: str, attempt_id: str, overlay: bool) -> Iterator[ForkLayout]:
        """A private fork for one attempt of ``owner`` (a trial), removed afterwards, also after failure.

        Attempts of one owner never overlap, so any fork of the owner still on
        disk was left by an attempt whose process was killed: it is removed first.
        """
        owner_dir = self.forks_root / owner
        if owner_dir.exists():
            shutil.rmtree(owner_dir, onerror=_force_remove)
        base = owner_dir / attempt_id
        lower = self.world_dir(world_id)
        kind: ForkKind = "overlay" if overlay else "copy"
        upper, work, merged = base / "upper", base / "work", base / "merged"
        if overlay:
            for d in (upper, work, merged):
                d.mkdir(parents=True)
        else:
            shutil.copytree(lower, merged)
            for path in [*merged.rglob("*"), merged]:
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
        try:
            yield ForkLayout(kind=kind, lower=str(lower), upper=str(upper), work=str(work), merged=str(merged))
        finally:
            shutil.rmtree(owner_dir, onerror=_force_remove)


def _force_remove(func, path, _exc) -> None:
    os.chmod(os.path.dirname(path), 0o755)
    os.chmod(path, 0o755)
    func(path)
