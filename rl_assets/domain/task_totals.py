"""Per-task sums of a task experiment's rewards: what its step summary keeps so the means never re-read a reward.

Sums, not means, so steps add up exactly (a mean of means would weigh a step
with a failed trial like a full one); the table's means are taken once, over
every trained step, from these.
"""

from __future__ import annotations

from pydantic import BaseModel

from rl_assets.domain.models import Reward


class TaskTotals(BaseModel):
    """One task's trials of a step (or of many, once added): their counts and sums."""

    trials: int = 0
    judged: int = 0
    verifier_sum: float = 0.0
    judge_sum: float = 0.0
    reward_sum: float = 0.0
    turns_sum: int = 0

    def plus(self, other: TaskTotals) -> TaskTotals:
        return TaskTotals(**{name: getattr(self, name) + getattr(other, name) for name in TaskTotals.model_fields})


def task_of(trial_id: str) -> str:
    """``s3-fix-tests-n1`` -> ``fix-tests``: a task trial's slot is its task and sample."""
    return trial_id.split("-", 1)[1].rsplit("-", 1)[0]


def task_totals(batch: list[Reward]) -> dict[str, TaskTotals]:
    """A step's rewards summed per task, tasks in sorted order."""
    totals: dict[str, TaskTotals] = {}
    for reward in sorted(batch, key=lambda r: r.trial_id):
        judged = reward.judge_score is not None
        one = TaskTotals(
            trials=1,
            judged=int(judged),
            verifier_sum=reward.verifier_reward or 0.0,
            judge_sum=reward.judge_score if judged else 0.0,
            reward_sum=reward.reward,
            turns_sum=reward.turns,
        )
        task = task_of(reward.trial_id)
        totals[task] = totals.get(task, TaskTotals()).plus(one)
    return dict(sorted(totals.items()))


def summed(steps: list[dict[str, TaskTotals]]) -> dict[str, TaskTotals]:
    """Many steps' totals, added per task."""
    total: dict[str, TaskTotals] = {}
    for step in steps:
        for task, totals in step.items():
            total[task] = total.get(task, TaskTotals()).plus(totals)
    return dict(sorted(total.items()))
