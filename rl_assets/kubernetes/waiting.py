"""Polling the Kubernetes API until an object reaches a state, with a deadline.

Binding, snapshotting and pod completion are asynchronous on the server: the
only portable way to wait for them is to re-read the object. The clock and the
sleep are injectable so a test against a fake API can drive the states and
never really sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    """How long to wait for a server-side state and how often to look."""

    timeout_s: float = 300.0
    interval_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def until(self, what: str, done: Callable[[], bool]) -> None:
        """Return once ``done()`` is true; raise ``TimeoutError`` naming ``what`` after the timeout."""
        deadline = self.clock() + self.timeout_s
        while not done():
            if self.clock() >= deadline:
                raise TimeoutError(f"{what}: not reached within {self.timeout_s:g}s")
            self.sleep(self.interval_s)
