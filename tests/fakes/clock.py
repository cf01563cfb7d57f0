"""A clock for code that waits: it moves only when that code sleeps, so a test of a deadline never really waits."""

from __future__ import annotations

from rl_assets.domain.waiting import Waiting


class FakeClock:
    """Time that advances by exactly what the code under test sleeps; ``sleeps`` records each sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def waiting(self, timeout_s: float = 30.0, interval_s: float = 1.0) -> Waiting:
        """A :class:`Waiting` on this clock."""
        return Waiting(timeout_s=timeout_s, interval_s=interval_s, sleep=self.sleep, clock=lambda: self.now)
