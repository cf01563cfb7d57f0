"""The trainer on the real local Ray head: exactly once, and restored after losing its actor."""

from __future__ import annotations

import os
import uuid

import ray
from ray.util import list_named_actors

from rl_assets.domain.bandit import apply_step
from rl_assets.domain.models import Policy, Reward
from rl_assets.resources.trainer import TrainerResource
from rl_assets_testkit.kills import wait_for


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


@ray.remote(num_cpus=0, max_restarts=0)
class _ActorOfOlderCode:
    """The trainer actor as code before the workload seams left it on a long-lived head: no ``interface``, and an
    ``apply`` without the workload's name."""

    def apply(self, chain: str, identity: str, parent_json: str, batch_json: list[str], lr: float):
        raise AssertionError("an outdated actor was called")


def test_an_actor_left_by_older_code_on_the_head_is_replaced_not_called(stores):
    experiment = f"trainer-{uuid.uuid4().hex[:8]}"
    trainer = _trainer()
    trainer._actor(experiment)  # connects this process to the head, in the resource's namespace
    name = f"trainer-{experiment}"
    ray.kill(ray.get_actor(name), no_restart=True)
    wait_for(lambda: name not in {a["name"] for a in list_named_actors(all_namespaces=True)}, f"{name} freed")
    old = _ActorOfOlderCode.options(name=name, lifetime="detached").remote()
    old_pid = ray.get(old.__ray_call__.remote(lambda self: os.getpid()))

    trainer = _trainer()  # a new step process: it has not checked the actor yet
    initial = Policy.initial(["w0"])
    batch = [_reward("s0-p0-n0", "w0", 3, 2.0)]
    policy, row, applied = trainer.train_step(
        stores.training, stores.checkpoints, experiment, "v1", 0, initial, batch, 2.0
    )

    assert applied and policy == apply_step(initial, batch, 2.0)
    assert row.actor_pid != old_pid, "the outdated actor was replaced"
    ray.shutdown()
