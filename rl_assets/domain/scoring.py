"""Verifier, simulated judge and reward: how a trajectory is scored.

The verifier is deterministic and free; the judge stands in for a paid LLM
call, so callers must record its verdicts durably and never ask twice.
"""

from __future__ import annotations

from rl_assets.domain.models import Reward, Rubric, Trajectory, Verdict
from rl_assets.domain.seeding import rng
from rl_assets.domain.world import world_secret

JUDGE_NOISE = 0.05


def verify(trajectory: Trajectory) -> bool:
    """True when the answer is the secret of the trial's world."""
    return trajectory.answer == world_secret(trajectory.world_id)[1]


def simulated_judge(trajectory: Trajectory, rubric: Rubric) -> Verdict:
    """The reference judge's verdict (pure; the caller adds latency and billing)."""
    correct = 1.0 if verify(trajectory) else 0.0
    efficiency = max(0.0, 1 - (len(trajectory.turns) - 1) / 8)
    tidy = 1.0 if trajectory.files_written == ["answer.txt"] else 0.0
    noise = rng("judge", trajectory.trial_id, rubric.name).uniform(-JUDGE_NOISE, JUDGE_NOISE)
    score = round(
        rubric.correctness_weight * correct
        + rubric.efficiency_weight * efficiency
        + rubric.tidiness_weight * tidy
        + noise,
        3,
    )
    return Verdict(
        trajectory_hash=trajectory.content_hash,
        rubric_name=rubric.name,
        rubric_hash=rubric.content_hash,
        correct=correct,
        efficiency=efficiency,
        tidy=tidy,
        score=score,
    )


def reward_of(trajectory: Trajectory, verdict: Verdict) -> Reward:
    """Verifier plus judge: ``round(verified + score, 3)``."""
    verified = verify(trajectory)
    return Reward(
        trial_id=trajectory.trial_id,
        world_id=trajectory.world_id,
        rubric_name=verdict.rubric_name,
        verified=verified,
        score=verdict.score,
        reward=round((1.0 if verified else 0.0) + verdict.score, 3),
        found_doc=trajectory.found_doc,
        turns=len(trajectory.turns),
        trajectory_hash=trajectory.content_hash,
        verdict_hash=verdict.content_hash,
    )


def task_reward(
    trajectory: Trajectory, rubric_name: str, verdict: Verdict | None, unjudged: str | None = None
) -> Reward:
    """A task trial's reward: the verifier's reward plus the LLM judge's score (the verifier alone without one);
    ``unjudged``: why a judge that was asked gave no verdict (``--judge-failure verifier-only``)."""
    if trajectory.verifier is None:
        raise ValueError(f"{trajectory.trial_id} has no verifier outcome: it is not a task trial")
    verifier_reward = trajectory.verifier.reward
    judge_score = None if verdict is None else verdict.score
    return Reward(
        trial_id=trajectory.trial_id,
        world_id=trajectory.world_id,
        rubric_name=rubric_name,
        verified=verifier_reward >= 1.0,
        score=judge_score or 0.0,
        reward=verifier_reward + (judge_score or 0.0),
        found_doc=None,
        turns=trajectory.model_calls,
        trajectory_hash=trajectory.content_hash,
        verdict_hash="" if verdict is None else verdict.content_hash,
        verifier_reward=verifier_reward,
        judge_score=judge_score,
        judge_usage=None if verdict is None else verdict.usage,
        verifier_provenance=trajectory.verifier.provenance,
        unjudged=unjudged,
    )
