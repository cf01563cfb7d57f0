"""Sealed worlds and their per-attempt forks, on the local filesystem.

A world is built once into ``worlds/<id>/``, made read-only, and sealed: its
content hash (every byte) goes to ``worlds/<id>.sha256`` and a seal record,
``worlds/<id>.seal``, holds that hash and a digest of the sealed tree's
metadata (see :func:`tree_manifest`). A trial attempt checks the seal, not
the bytes: :meth:`LocalWorlds.verified_hash` costs one ``lstat`` per entry,
so a trial on a 1 GB world costs what it costs on a 1 MB one and the O(1)
overlay fork stays O(1). The full re-hash runs in the audit before driving
(:meth:`LocalWorlds.audited_hash`) and whenever a world is rebuilt; a world
found modified is rebuilt (deterministically, to the same hash) by its next
materialization, never silently used.

Builds of one world are serialised by an ``flock`` on ``worlds/.<id>.lock``
(worlds live on the local filesystem, so a file lock is the right scope):
a second build waits and then finds the world sealed, instead of replacing
the tree the first build just sealed and a trial may already be reading.

Each rollout attempt gets its own fork under ``forks/<attempt>/``: an overlay
(upper and work dirs, O(1) in world size) where the sandbox can mount one,
otherwise a plain copy that says it is one. The parent world is never
writable by a trial: overlay writes land in the upper dir, and a copy is a copy.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rl_assets.domain.hashing import tree_hash
from rl_assets.domain.world import build_world
from rl_assets.sandbox.protocol import ForkKind, ForkLayout
from rl_assets.stores.artifacts import fsync_dir
from rl_assets.tasks.snapshot import is_task_world, write_task_world


class WorldTamperedError(RuntimeError):
    """A sealed world's content no longer matches its recorded hash."""


def tree_manifest(root: Path) -> str:
    """Digest of every entry's (path, mode, size, inode, links, mtime_ns, ctime_ns), root included.

    This is the cheap proof that a sealed tree is unchanged: it reads metadata
    only (one ``lstat`` per entry, no file contents). Every way of changing a
    file through the kernel (write, truncate, chmod, rename, link, unlink,
    replacing it) moves its ``ctime`` or its directory's, and ``ctime`` cannot
    be set from user space, so restoring the ``mtime`` with ``touch`` does not
    hide an edit. The honest limit: someone who can set the system clock back
    and forth as root, or write the block device (or the volume behind it)
    directly, can change bytes without changing the manifest; that is why the
    audit before every ``train`` re-hashes the contents, and why the tree is
    read-only to everyone, so that only root or the owner can edit it at all.
    """
    h = hashlib.sha256()

    def visit(path: Path, rel: str) -> None:
        st = os.lstat(path)
        h.update(
            f"{rel}\0{st.st_mode:o} {st.st_size} {st.st_ino} {st.st_nlink} {st.st_mtime_ns} {st.st_ctime_ns}\n".encode()
        )
        if stat.S_ISDIR(st.st_mode):
            for name in sorted(os.listdir(path)):
                visit(path / name, f"{rel}/{name}")

    visit(root, ".")
    return h.hexdigest()


@dataclass(frozen=True)
class Seal:
    """What a sealed world must still be: its content hash and the digest of its tree's metadata."""

    content_hash: str
    manifest: str


def _make_read_only(root: Path) -> None:
    for path in [*root.rglob("*"), root]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


class LocalWorlds:
    """Worlds and forks under one home."""

    def __init__(self, worlds_root: Path, forks_root: Path, tasks_root: Path | None = None) -> None:
        self.worlds_root = worlds_root
        self.forks_root = forks_root
        self.tasks_root = tasks_root
        """Recorded task snapshots (:mod:`rl_assets.tasks.snapshot`): a task world is built from one."""

    def _build(self, world_id: str, staging: Path) -> None:
        """Write the world's files: a task's ``environment/`` for a task world, else the reference world."""
        if not is_task_world(world_id):
            build_world(world_id, staging)
            return
        if self.tasks_root is None:
            raise FileNotFoundError(f"task world {world_id} has no recorded task snapshot to build from")
        write_task_world(self.tasks_root, world_id, staging)

    def world_dir(self, world_id: str) -> Path:
        return self.worlds_root / world_id

    def _hash_file(self, world_id: str) -> Path:
        return self.worlds_root / f"{world_id}.sha256"

    def _seal_file(self, world_id: str) -> Path:
        return self.worlds_root / f"{world_id}.seal"

    @contextmanager
    def _lock(self, world_id: str, shared: bool = False) -> Iterator[None]:
        """The world's file lock: exclusive to build or seal it, shared to check it."""
        self.worlds_root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.worlds_root / f".{world_id}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock, also if this process dies

    def _recorded_hash(self, world_id: str) -> str | None:
        hash_file = self._hash_file(world_id)
        return hash_file.read_text().strip() if hash_file.exists() else None

    def _read_seal(self, world_id: str) -> Seal | None:
        try:
            record = json.loads(self._seal_file(world_id).read_text())
            return Seal(content_hash=str(record["content_hash"]), manifest=str(record["manifest"]))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def _write_seal(self, world_id: str, content_hash: str) -> Seal:
        """Record the seal of the tree now in place (its manifest is taken after the rename, which moves ctime)."""
        seal = Seal(content_hash=content_hash, manifest=tree_manifest(self.world_dir(world_id)))
        for path, text in (
            (self._hash_file(world_id), content_hash),
            (self._seal_file(world_id), json.dumps({"content_hash": seal.content_hash, "manifest": seal.manifest})),
        ):
            tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp")
            with open(tmp, "x", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        fsync_dir(self.worlds_root)
        return seal

    def ensure_built(self, world_id: str) -> tuple[str, bool]:
        """Build and seal the world if absent or damaged; returns ``(content hash, built now)``.

        Building is deterministic, so a damaged world is rebuilt and must come
        out with the hash it was recorded with; any other outcome is an error,
        because trials already rolled out in it would no longer match. The
        world's lock is held throughout, so concurrent builds build it once.
        """
        with self._lock(world_id):
            recorded = self._recorded_hash(world_id)
            if recorded is not None:
                try:  # a build runs once per world (and after damage), so it affords the full re-hash
                    digest = self.audited_hash(world_id)
                    if self._read_seal(world_id) is None:
                        self._seal_in_place(world_id, digest)
                    else:
                        self._cheap_check(world_id)
                    return digest, False
                except (WorldTamperedError, FileNotFoundError):
                    pass  # rebuilt below
            staging = self.worlds_root / f".{world_id}.{uuid.uuid4().hex}"
            self._build(world_id, staging)
            digest = tree_hash(staging)
            if recorded is not None and digest != recorded:
                shutil.rmtree(staging)
                raise WorldTamperedError(
                    f"world {world_id} rebuilt with hash {digest}, but it was recorded as {recorded}: "
                    "the world builder changed under an existing experiment"
                )
            _make_read_only(staging)
            target = self.world_dir(world_id)
            if target.exists():  # a damaged world, or an unsealed leftover of a crashed build
                shutil.rmtree(target, onerror=_force_remove)
            os.replace(staging, target)
            self._write_seal(world_id, digest)
            return digest, True

    def reseal(self, world_id: str) -> str:
        """Re-hash the world's tree as it is now and seal it (for tools that grow a world in place)."""
        with self._lock(world_id):
            return self._seal_in_place(world_id, tree_hash(self.world_dir(world_id)))

    def _seal_in_place(self, world_id: str, digest: str) -> str:
        _make_read_only(self.world_dir(world_id))
        return self._write_seal(world_id, digest).content_hash

    def _cheap_check(self, world_id: str) -> str:
        seal = self._read_seal(world_id)
        if seal is None or seal.content_hash != self._recorded_hash(world_id):
            raise WorldTamperedError(f"world {world_id} has no valid seal record; `rl-assets train` rebuilds it")
        if tree_manifest(self.world_dir(world_id)) != seal.manifest:
            raise WorldTamperedError(
                f"world {world_id} was modified after it was sealed (its files changed since the seal); "
                "`rl-assets train` rebuilds it"
            )
        return seal.content_hash

    def verified_hash(self, world_id: str) -> str:
        """The sealed world's hash, if its tree is unchanged since the seal: O(entries), reads no contents.

        This is the per-attempt check; see :func:`tree_manifest` for what it
        proves and where it stops. A world without a seal record (sealed by an
        older version) is re-hashed once and sealed.
        """
        if self._read_seal(world_id) is None:
            with self._lock(world_id):
                if self._read_seal(world_id) is None:
                    return self._seal_in_place(world_id, self.audited_hash(world_id))
        with self._lock(world_id, shared=True):
            return self._cheap_check(world_id)

    def sealed_hash(self, world_id: str) -> str:
        """The seal check of :meth:`verified_hash`, read-only: a world without a seal record is an error, not sealed.

        For readers that must not change the home (``rl-assets report``).
        """
        with self._lock(world_id, shared=True):
            return self._cheap_check(world_id)

    def audited_hash(self, world_id: str) -> str:
        """The world's hash re-computed from every byte and checked against the record (the audit's check)."""
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
