"""Seeded randomness: every draw of the workload comes from here.

A draw depends only on named parts (``seed("trial", "s0-p1-n0")``), never on
wall-clock time, process ids or completion order, so a retried or replayed
unit sees exactly the stream an uninterrupted one would have seen.
"""

from __future__ import annotations

import random

try:  # CPython's builtin SHA-256, the same digest without loading OpenSSL: a sandboxed agent imports this module,
    from _sha256 import sha256  # and OpenSSL's load was an eighth of its start (3.11; ``_sha2`` from 3.12)
except ImportError:
    try:
        from _sha2 import sha256
    except ImportError:
        from hashlib import sha256


def seed(*parts: str) -> int:
    """First 8 hex digits of ``sha256("|".join(parts))``, read as an integer."""
    digest = sha256("|".join(parts).encode("utf-8")).hexdigest()
    return int(digest[:8], 16)


def rng(*parts: str) -> random.Random:
    """A ``random.Random`` seeded with :func:`seed` of ``parts``."""
    return random.Random(seed(*parts))
