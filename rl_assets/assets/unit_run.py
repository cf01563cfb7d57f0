"""What one trial's work needs of the run carrying it: its partition, its attempt, a log and the run's tags.

A trial's rollout and its judging run either as the ``trajectories`` and ``rewards`` assets of a run of
their own (a UI backfill, ``--trials-per-run 1``), or as one of many trials in a rollout run
(:mod:`rl_assets.assets.rollout_batches`). Both hand the same functions a :class:`UnitRun`, so a trial's
records, retries and metadata are the same whichever run carried it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import dagster as dg


class UnitLog(Protocol):
    def info(self, msg: str) -> None: ...

    def warning(self, msg: str) -> None: ...


@dataclass(frozen=True)
class UnitRun:
    partition_key: str
    """The trial's partition key, ``exp/s0|p1-n0``."""
    attempt: int
    """0 for the first attempt; a retry's number (Dagster's ``retry_number`` in a run of its own)."""
    log: UnitLog
    tags: Mapping[str, str]
    """The carrying run's tags: the rubric it judges with (``rl/rubric``)."""

    @classmethod
    def of(cls, context: dg.AssetExecutionContext) -> UnitRun:
        return cls(str(context.partition_key), context.retry_number, context.log, context.run.tags)
