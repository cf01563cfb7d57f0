"""Sample records for the judge-ledger, billing, lock and rate-limit tests: one trajectory shape, one rubric."""

from __future__ import annotations

import uuid

from rl_assets.domain.models import Rubric, Trajectory, Turn

RUBRIC = Rubric(name="v1", correctness_weight=1.0, efficiency_weight=0.3, tidiness_weight=0.1)


def sample_trajectory(tag: str | None = None) -> Trajectory:
    """A found-the-secret trajectory whose trial id ends in ``tag`` (a fresh one if None), so its hash is its own."""
    return Trajectory(
        trial_id=f"s0-p0-n0-{tag or uuid.uuid4().hex[:8]}",
        world_id="w0",
        world_hash="h",
        policy_version=0,
        policy_hash="p",
        turns=[Turn(doc=1, found=True)],
        answer="w0-secret-x",
        files_written=["answer.txt"],
    )
