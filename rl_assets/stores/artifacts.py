"""Checksummed JSON artifacts, written atomically.

A record is stored as ``{"sha256": ..., "payload": ...}`` through a temp file
and a rename, so a reader sees the whole record or none of it, and a record
damaged behind the system's back is detected instead of silently used.

The temp file's name is unique per write (pid and a random suffix), since
pods sharing a volume have their own pid spaces and two writers with pid 1
would otherwise write into one temp file. The file is fsynced before the
rename and its directory after it, so a record that a ledger row points at
survives a power loss, not only a process crash.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from rl_assets.domain.hashing import canonical_json

M = TypeVar("M", bound=BaseModel)


def fsync_dir(directory: Path) -> None:
    """Make a rename into ``directory`` durable: the entry lives in the directory, not the file."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CorruptArtifactError(RuntimeError):
    """A stored record does not match its checksum or its schema."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


class ArtifactStore:
    """JSON records under one root directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, rel: str) -> Path:
        return self.root / f"{rel}.json"

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()

    def write(self, rel: str, record: BaseModel) -> Path:
        payload = canonical_json(record.model_dump(mode="json"))
        body = json.dumps(
            {"sha256": hashlib.sha256(payload.encode()).hexdigest(), "payload": json.loads(payload)},
            sort_keys=True,
        )
        path = self.path(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "x", encoding="utf-8") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(path.parent)
        return path

    def quarantine(self, path: Path) -> Path:
        """Move a damaged record out of the readers' way, keeping it for inspection."""
        target = self.root.parent / "quarantine" / path.relative_to(self.root)
        target = target.with_name(f"{target.name}.{uuid.uuid4().hex[:8]}")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        fsync_dir(target.parent)
        fsync_dir(path.parent)
        return target

    def read(self, rel: str, model: type[M]) -> M | None:
        """The record, or None if absent; raises :class:`CorruptArtifactError` if damaged."""
        path = self.path(rel)
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CorruptArtifactError(path, f"not valid JSON ({err})") from None
        if not isinstance(body, dict) or "payload" not in body:
            raise CorruptArtifactError(path, "not an rl-assets artifact")
        payload = canonical_json(body["payload"])
        if hashlib.sha256(payload.encode()).hexdigest() != body.get("sha256"):
            raise CorruptArtifactError(path, "checksum mismatch, the record was modified")
        try:
            return model.model_validate(body["payload"])
        except ValueError as err:
            raise CorruptArtifactError(path, str(err)) from None
