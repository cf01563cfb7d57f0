"""Reading a record a unit's work rests on: a damaged one is quarantined and its unit marked damaged.

This is the one place where a damaged record moves. Read paths (``status``,
``report``, results) never call it: they read the stores directly and report
what they find, so looking at an experiment cannot change it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from rl_assets.stores.artifacts import ArtifactStore, CorruptArtifactError
from rl_assets.stores.damage import DamageKind, DamageLog

T = TypeVar("T")


@dataclass(frozen=True)
class Checked(Generic[T]):
    """A record read for use: the record, or why it cannot be used."""

    record: T | None
    problem: str | None = None
    """``"<what> record is missing"`` or ``"<what> record was damaged (<why>); quarantined"``."""
    newly_damaged: bool = False
    """Whether this read opened the damage on the unit (False if it was already open, or nothing was wrong)."""


def read_or_quarantine(
    artifacts: ArtifactStore,
    damage: DamageLog,
    read: Callable[[], T | None],
    what: str,
    kind: DamageKind,
    partition_key: str,
    *,
    missing_is_damage: bool = True,
) -> Checked[T]:
    """``read()``; a damaged record is moved to ``quarantine/`` and, like a missing one, opens damage on the unit.

    The damage makes the planner treat the unit as not done, so the driver
    regenerates exactly it. ``missing_is_damage=False`` is for a record whose
    absence the caller explains otherwise (a reward of a trial that failed for good).
    """
    try:
        record = read()
    except CorruptArtifactError as err:
        artifacts.quarantine(err.path)
        problem = f"{what} record was damaged ({err}); quarantined"
    else:
        if record is not None or not missing_is_damage:
            return Checked(record)
        problem = f"{what} record is missing"
    return Checked(None, problem, damage.report(kind, partition_key, problem))
