"""The judge resource: a paid call, made at most once per (trajectory, rubric).

The call itself is the workload's :class:`~rl_assets.workloads.seams.Judge`
(the reference workload's is the seeded simulated judge); this resource is the
durability around it, the same for every judge. ``latency_s`` simulates an
API's duration before each call, and every call counts as billed. A real
judge's ``api_key`` comes from ``dg.EnvVar`` (a Kubernetes Secret in
production) and is never logged or put in metadata.

A call that times out is not paid for twice: the ledger records its late
answer and uses it (see :mod:`rl_assets.stores.verdicts`).

Two limits protect a paid API: the ``judge`` pool (Dagster's, set with
``dagster instance concurrency set judge N``) bounds concurrent calls, and
``max_calls_per_minute`` bounds their rate across every process.
"""

from __future__ import annotations

import time

import dagster as dg

from rl_assets.domain.models import Trajectory, Verdict
from rl_assets.domain.rubrics import AnyRubric
from rl_assets.stores.judge_rate import JudgeRateLimit
from rl_assets.stores.verdicts import VerdictLedger, verdict_key
from rl_assets.workloads.registry import REFERENCE
from rl_assets.workloads.seams import Judge


class JudgeResource(dg.ConfigurableResource):
    """Scores trajectories under a rubric, recording every verdict durably."""

    judge_id: str | None = None
    """The name verdicts and the rate limit know the judge by; None for the judge's own ``judge_id``."""
    api_key: str | None = None
    max_calls_per_minute: int | None = None
    """The API's quota; None for no limit. A call waits for a free slot at most ``rate_wait_s``."""
    rate_wait_s: float = 900.0

    def identity(self, judge: Judge = REFERENCE.judge) -> str:
        """The judge's name in verdict keys, rate limits and metadata."""
        return self.judge_id or judge.judge_id

    def key(self, experiment: str, trajectory: Trajectory, rubric: AnyRubric, judge: Judge = REFERENCE.judge) -> str:
        """Verdicts are scoped to their experiment, so each experiment's judge bill is its own."""
        return f"{experiment}:" + verdict_key(trajectory.content_hash, rubric.content_hash, self.identity(judge))

    def judge(
        self,
        ledger: VerdictLedger,
        trajectory: Trajectory,
        rubric: AnyRubric,
        experiment: str,
        latency_s: float,
        timeout_s: float,
        judge: Judge = REFERENCE.judge,
    ) -> tuple[Verdict, bool]:
        """``(verdict, cache_hit)`` of the workload's ``judge``; it is called only when no verdict is recorded."""

        limit = (
            None
            if self.max_calls_per_minute is None
            else JudgeRateLimit(ledger.db, self.identity(judge), self.max_calls_per_minute)
        )

        def call() -> Verdict:
            if latency_s:
                time.sleep(latency_s)
            return judge.verdict(trajectory, rubric)

        return ledger.judge_once(
            self.key(experiment, trajectory, rubric, judge),
            experiment,
            trajectory.trial_id,
            call,
            reserve=None if limit is None else lambda: limit.acquire(self.rate_wait_s),
            timeout_s=timeout_s,
        )
