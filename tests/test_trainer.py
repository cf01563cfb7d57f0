"""The trainer on the real local Ray head: exactly once, and restored after losing its actor."""

from __future__ import annotations

import os
import uuid

import ray

from rl_assets.domain.bandit import apply_step
from rl_assets.domain.models import Policy, Reward
from rl_assets.resources.trainer import TrainerResource


def _reward(trial: str, world: str, doc: int, value: float) -> Reward:
    return Reward(
        trial_id=trial,
        world_id=world,
        rubric_name="v1",
        verified=True,
        score=value - 1,
        reward=value,
        found_doc=doc,
        turns=2,
        trajectory_hash="t",
        verdict_hash="v",
    )


def _trainer() -> TrainerResource:
    return TrainerResource(
        ray_address=os.environ["RL_ASSETS_RAY_ADDRESS"], namespace=os.environ["RL_ASSETS_RAY_NAMESPACE"]
    )


def test_a_step_is_applied_exactly_once_and_survives_losing_the_actor(stores):
    experiment = f"trainer-{uuid.uuid4().hex[:8]}"
    trainer = _trainer()
    initial = Policy.initial(["w0"])
    batch0 = [_reward("s0-p0-n1", "w0", 3, 1.5), _reward("s0-p0-n0", "w0", 3, 2.0)]
    args = (stores.training, stores.checkpoints, experiment, "v1")

    p1, row1, applied1 = trainer.train_step(*args, 0, initial, batch0, 2.0)
    p1_again, row1_again, applied1_again = trainer.train_step(*args, 0, initial, batch0, 2.0)
    assert applied1 and not applied1_again
    assert p1 == p1_again == apply_step(initial, batch0, 2.0)
    assert row1 == row1_again and p1.priors["w0"][3] == 8.0
    assert len(stores.training.steps(experiment, "v1")) == 1

    # Lose the actor; the next step rebuilds it from the parent checkpoint, applied once.
    actor = ray.get_actor(f"trainer-{experiment}", namespace=os.environ["RL_ASSETS_RAY_NAMESPACE"])
    ray.kill(actor, no_restart=True)
    batch1 = [_reward("s1-p0-n0", "w0", 3, 1.0)]
    p2, row2, applied2 = trainer.train_step(*args, 1, p1, batch1, 2.0)
    assert applied2 and p2 == apply_step(p1, batch1, 2.0) and p2.version == 2
    assert row2.actor_pid != row1.actor_pid
    assert [s.step for s in stores.training.steps(experiment, "v1")] == [0, 1]
    assert stores.checkpoints.load(experiment, "v1", 1, expected_hash=row2.policy_hash) == p2
    ray.shutdown()
