"""``--trainer grpo`` in the real detached trainer actor, under the training ledger: applied exactly once, and
a SIGKILLed actor rebuilt from the parent checkpoint ends on the bytes of an uninterrupted run."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import ray
from ray.util import list_named_actors

from rl_assets.domain.experiment import TASKS_WORKLOAD
from rl_assets.domain.models import Policy
from rl_assets.resources.trainer import TrainerResource
from rl_assets.stores.artifacts import ArtifactStore
from rl_assets.stores.training import CheckpointStore
from rl_assets.workloads.grpo import checkpoint
from rl_assets.workloads.registry import TASKS
from rl_assets_testkit.chat_batches import GRPO_LR, STEP_REWARDS, grpo_config, store_step
from rl_assets_testkit.kills import actor_process, wait_for

LR = GRPO_LR
RUBRIC = "task-done"


def _trainer() -> TrainerResource:
    return TrainerResource(
        ray_address=os.environ["RL_ASSETS_RAY_ADDRESS"], namespace=os.environ["RL_ASSETS_RAY_NAMESPACE"]
    )


def _initial() -> Policy:
    config = grpo_config()
    return TASKS.trainer.initial(config)


def _train(trainer, stores, checkpoints: CheckpointStore, experiment: str, steps: range, policy: Policy):
    """Steps ``steps`` of ``experiment`` through the ledger; ``(policy, last ledger row)``."""
    row = None
    for step in steps:
        batch = store_step(checkpoints.artifacts.root, experiment, step, STEP_REWARDS[step])
        policy, row, applied = trainer.train_step(
            stores.training, checkpoints, experiment, RUBRIC, step, policy, batch, LR, TASKS_WORKLOAD
        )
        assert applied
    return policy, row


def test_a_grpo_step_is_applied_exactly_once(stores):
    experiment = f"grpo-{uuid.uuid4().hex[:8]}"
    trainer = _trainer()
    initial = _initial()
    batch = store_step(stores.artifacts.root, experiment, 0, STEP_REWARDS[0])
    args = (stores.training, stores.checkpoints, experiment, RUBRIC, 0, initial, batch, LR, TASKS_WORKLOAD)

    first, row, applied = trainer.train_step(*args)
    again, row_again, applied_again = trainer.train_step(*args)

    assert applied and not applied_again
    assert first == again and row == row_again and first.version == 1
    assert [s.step for s in stores.training.steps(experiment, RUBRIC)] == [0]
    assert stores.checkpoints.load(experiment, RUBRIC, 0, expected_hash=row.policy_hash) == first
    saved = checkpoint.read(stores.artifacts.root / "models", first.lm.checkpoint)
    assert int(saved.optimizer["state.0.step"]) == 1, "the optimiser stepped once"
    assert saved.state["parent_hash"] == initial.content_hash and saved.state["step"] == 1
    assert first.lm.stats.objective == "reinforce" and first.lm.stats.token_source == "retokenized"
    ray.shutdown()


def test_a_killed_actor_is_rebuilt_from_the_parent_and_ends_on_the_same_bytes(stores, tmp_path: Path):
    trainer = _trainer()
    initial = _initial()
    # uninterrupted: steps 0..2 in one actor, in an artifact root of its own
    apart = CheckpointStore(ArtifactStore(tmp_path / "uninterrupted"))
    whole, _ = _train(trainer, stores, apart, f"grpo-{uuid.uuid4().hex[:8]}", range(3), initial)

    # interrupted: steps 0..1, SIGKILL the actor after step 1's ledger row, then step 2 on a rebuilt actor
    experiment = f"grpo-{uuid.uuid4().hex[:8]}"
    parent, row = _train(trainer, stores, stores.checkpoints, experiment, range(2), initial)
    victim = actor_process(row.actor_pid)
    victim.kill()
    victim.wait(timeout=30)
    name = f"trainer-{experiment}"
    wait_for(lambda: name not in {a["name"] for a in list_named_actors(all_namespaces=True)}, f"{name} freed")
    resumed, last = _train(trainer, stores, stores.checkpoints, experiment, range(2, 3), parent)

    assert last.actor_pid != row.actor_pid, "a new actor applied step 2"
    assert [s.step for s in stores.training.steps(experiment, RUBRIC)] == [0, 1, 2]
    assert resumed == whole and resumed.version == 3
    here = checkpoint.read_files(stores.artifacts.root / "models", resumed.lm.checkpoint)
    there = checkpoint.read_files(apart.artifacts.root / "models", whole.lm.checkpoint)
    assert here == there, "the final checkpoint is byte-identical"
    ray.shutdown()
