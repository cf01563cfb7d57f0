"""When a command following an experiment plans it again: at once on a change of what
:func:`~rl_assets.driver.planner.last_change` watches (a run created, started or ended; a drive or
re-scoring requested), and otherwise every :data:`REFRESH_S`, for its progress line.

A plan reads the experiment's every run and partition, and ``train`` used to plan on each of its
0.5-second polls: its own CPU during a step of 256 task trials went from 2.96 to 2.33 s with this, and
from 5.08 to 4.41 s at 1,024 reference trials (``benchmarks/latency_bound.py``'s ``train_cpu_s``). What it
watches between plans is two indexed reads. The step that ends the experiment ends with a run, so the
command still sees the plan done as that run ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

REFRESH_S = 2.0
"""How old a following command's plan may get while nothing it watches changes: its progress line's lag."""


@dataclass
class Replanning:
    """The follower's last plan: what it had seen change, and when."""

    refresh_s: float = REFRESH_S
    _seen: tuple[Any, ...] | None = field(default=None, init=False)
    _planned_at: float = field(default=-math.inf, init=False)

    def due(self, change: tuple[Any, ...], now: float) -> bool:
        """Whether to plan now, given the watched state read just before (``now``: ``time.monotonic()``); a
        yes counts as planned, so read the change before the plan: one that lands between them is seen next time."""
        if change == self._seen and now - self._planned_at < self.refresh_s:
            return False
        self._seen, self._planned_at = change, now
        return True
