"""Seeded randomness: every draw of the workload comes from here.

A draw depends only on named parts (``seed("trial", "s0-p1-n0")``), never on
wall-clock time, process ids or completion order, so a retried or replayed
unit sees exactly the stream an uninterrupted one would have seen.
"""

from __future__ import annotations

import hashlib
import random


def seed(*parts: str) -> int:
    """First 8 hex digits of ``sha256("|".join(parts))``, read as an integer."""
    digest = hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()
    return int(digest[:8], 16)


def rng(*parts: str) -> random.Random:
    """A ``random.Random`` seeded with :func:`seed` of ``parts``."""
    return random.Random(seed(*parts))
