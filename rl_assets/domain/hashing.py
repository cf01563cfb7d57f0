"""Content hashes: the identity of every durable unit.

A unit's identity is the hash of what determines it, so equal inputs give the
same key across retries, reruns and experiments, and stores keyed by these
hashes reuse work without any bookkeeping.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: one text per value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def content_hash(value: Any, length: int = 16) -> str:
    """Short sha256 of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:length]


def tree_hash(root: Path) -> str:
    """sha256 over every file's relative path and bytes, in sorted order (16 hex digits): a directory's identity."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:16]
