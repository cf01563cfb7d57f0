"""Waiting for a state that arrives asynchronously, with a deadline: the package's one polling helper.

A server's port opening, a restarting Postgres accepting connections, a lock
freed by another session, a Kubernetes object reaching a phase: none of them
can be waited on portably, so the code re-reads the state every so often until
a timeout. Such waits go through here: each caller states only what it waits
for, how long and how often, and what the timeout means to it, while the clock,
the deadline arithmetic and the cadence stay in one place. The clock and the
sleep are injectable so a test can drive the states and never really sleep.
Standard library only: every layer, the domain included, may wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Waiting:
    """How long to wait for a state and how often to look (``timeout_s`` may be ``math.inf``: no deadline)."""

    timeout_s: float = 300.0
    interval_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def deadline(self) -> Deadline:
        """A deadline ``timeout_s`` from now, for a loop that does work of its own between looks."""
        return Deadline(self.clock() + self.timeout_s, self)

    def until(self, what: str, done: Callable[[], bool]) -> None:
        """Return once ``done()`` is true; raise ``TimeoutError`` naming ``what`` after the timeout."""
        self.value(done, lambda: TimeoutError(f"{what}: not reached within {self.timeout_s:g}s"))

    def value(self, probe: Callable[[], T], timed_out: Callable[[], BaseException]) -> T:
        """``probe()``'s first truthy value; ``timed_out()`` is raised after the timeout.

        ``timed_out`` is a factory so each caller keeps its own error type and message (its callers and
        tests know them), and builds it only when the wait has failed.
        """
        deadline = self.deadline()
        while not (found := probe()):
            if deadline.expired():
                raise timed_out()
            deadline.sleep()
        return found

    def retrying(self, attempt: Callable[[], T], errors: tuple[type[BaseException], ...]) -> T:
        """``attempt()``'s result, attempted again after each of ``errors`` until the timeout; then that error.

        For a server that is restarting: its refusals are the state to wait out, and the last one, raised
        as it is, says why the wait ended.
        """
        deadline = self.deadline()
        while True:
            try:
                return attempt()
            except errors:
                if deadline.expired():
                    raise
            deadline.sleep()


@dataclass(frozen=True)
class Deadline:
    """The end of one wait, on its :class:`Waiting`'s clock: for loops whose look is more than a probe.

    Killing what is left before each look, logging who is still awaited, or answering the timeout with
    something other than an error (a lock not taken, a sensor tick that skips) does not fit a probe; such a
    loop asks :meth:`expired` and calls :meth:`sleep` itself, and still leaves the clock and the cadence here.
    """

    at: float
    waiting: Waiting

    def expired(self) -> bool:
        """Whether the wait's time is up (at the deadline itself it is)."""
        return self.waiting.clock() >= self.at

    def sleep(self) -> None:
        """Sleep one interval before the next look."""
        self.waiting.sleep(self.waiting.interval_s)
