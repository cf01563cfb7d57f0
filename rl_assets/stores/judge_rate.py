"""A per-window limit on paid judge calls, shared by every process that judges.

Dagster's ``judge`` pool bounds how many judge calls run *at once*; an API
quota is usually a *rate* (calls per minute), which pools cannot express. This
is a sliding window kept in the ledger database, so every run worker and pod
of a deployment shares one count, and the database's clock is the only clock
(pods' clocks may disagree). A process takes a slot under a transaction-level
advisory lock: count the calls of the last window, and either record its call
or wait until the oldest one leaves the window. Calls stay recorded for
``KEEP_S`` (the evidence of the limit), then are pruned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rl_assets.stores.database import Database
from rl_assets.stores.locks import LockSpace, hashed, xact_lock

KEEP_S = 3600.0


class JudgeRateTimeout(RuntimeError):
    """No slot in the rate window became free before the deadline."""


@dataclass(frozen=True)
class JudgeRateLimit:
    db: Database
    judge_id: str
    max_calls: int
    window_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_calls < 1 or self.window_s <= 0:
            raise ValueError(f"a judge rate limit needs max_calls >= 1 and window_s > 0, not {self}")

    def acquire(self, timeout_s: float) -> float:
        """Take a slot for one call, waiting for the window if it is full; returns the seconds waited."""
        started = time.monotonic()
        lock = hashed(LockSpace.JUDGE_RATE, self.judge_id)  # two judges sharing a hash only take turns
        while True:
            with self.db.transaction() as cur:
                xact_lock(cur, lock)
                cur.execute(
                    "DELETE FROM rl_judge_rate WHERE judge_id = %s "
                    "AND called_at <= clock_timestamp() - make_interval(secs => %s)",
                    (self.judge_id, max(self.window_s, KEEP_S)),
                )
                cur.execute(
                    "SELECT count(*), extract(epoch FROM min(called_at) + make_interval(secs => %s) "
                    "- clock_timestamp()) FROM rl_judge_rate WHERE judge_id = %s "
                    "AND called_at > clock_timestamp() - make_interval(secs => %s)",
                    (self.window_s, self.judge_id, self.window_s),
                )
                used, free_in = cur.fetchone()
                if used < self.max_calls:
                    cur.execute("INSERT INTO rl_judge_rate (judge_id) VALUES (%s)", (self.judge_id,))
                    return time.monotonic() - started
            wait = max(float(free_in), 0.01)
            if time.monotonic() - started + wait > timeout_s:
                raise JudgeRateTimeout(
                    f"judge {self.judge_id!r} allows {self.max_calls} calls per {self.window_s:g} s; "
                    f"no slot within {timeout_s:g} s"
                )
            time.sleep(wait)  # until the oldest call in the window leaves it
