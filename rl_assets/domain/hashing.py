"""Content hashes: the identity of every durable unit.

A unit's identity is the hash of what determines it, so equal inputs give the
same key across retries, reruns and experiments, and stores keyed by these
hashes reuse work without any bookkeeping.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: one text per value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def content_hash(value: Any, length: int = 16) -> str:
    """Short sha256 of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:length]
