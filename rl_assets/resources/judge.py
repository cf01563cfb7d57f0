"""The judge resource: a paid call, made at most once per (trajectory, rubric).

The simulated judge stands in for an LLM API: it sleeps ``latency_s`` per call
and every call counts as billed. A real judge plugs in by replacing
:meth:`JudgeResource._call`; ``api_key`` then comes from ``dg.EnvVar`` (a
Kubernetes Secret in production) and is never logged or put in metadata.

A call that times out is not paid for twice: the ledger records its late
answer and uses it (see :mod:`rl_assets.stores.verdicts`).

Two limits protect a paid API: the ``judge`` pool (Dagster's, set with
``dagster instance concurrency set judge N``) bounds concurrent calls, and
``max_calls_per_minute`` bounds their rate across every process.
"""

from __future__ import annotations

import time

import dagster as dg

from rl_assets.domain.models import Rubric, Trajectory, Verdict
from rl_assets.domain.scoring import simulated_judge
from rl_assets.stores.judge_rate import JudgeRateLimit
from rl_assets.stores.verdicts import VerdictLedger, verdict_key


class JudgeResource(dg.ConfigurableResource):
    """Scores trajectories under a rubric, recording every verdict durably."""

    judge_id: str = "simulated-v1"
    api_key: str | None = None
    max_calls_per_minute: int | None = None
    """The API's quota; None for no limit. A call waits for a free slot at most ``rate_wait_s``."""
    rate_wait_s: float = 900.0

    def key(self, experiment: str, trajectory: Trajectory, rubric: Rubric) -> str:
        """Verdicts are scoped to their experiment, so each experiment's judge bill is its own."""
        return f"{experiment}:" + verdict_key(trajectory.content_hash, rubric.content_hash, self.judge_id)

    def _call(self, trajectory: Trajectory, rubric: Rubric, latency_s: float) -> Verdict:
        if latency_s:
            time.sleep(latency_s)
        return simulated_judge(trajectory, rubric)

    def judge(
        self,
        ledger: VerdictLedger,
        trajectory: Trajectory,
        rubric: Rubric,
        experiment: str,
        latency_s: float,
        timeout_s: float,
    ) -> tuple[Verdict, bool]:
        """``(verdict, cache_hit)``; the API is called only when no verdict is recorded."""

        limit = (
            None
            if self.max_calls_per_minute is None
            else JudgeRateLimit(ledger.db, self.judge_id, self.max_calls_per_minute)
        )

        return ledger.judge_once(
            self.key(experiment, trajectory, rubric),
            experiment,
            trajectory.trial_id,
            lambda: self._call(trajectory, rubric, latency_s),
            reserve=None if limit is None else lambda: limit.acquire(self.rate_wait_s),
            timeout_s=timeout_s,
        )
