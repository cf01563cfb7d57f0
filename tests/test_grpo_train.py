"""``rl-assets train --trainer grpo --model tiny`` end to end on the example tasks.

The agent is still answered by the stand-in model server (serving the trained checkpoint is the second
half of the GRPO issue), so the policy that acts is not the one trained: this shows the durable loop
around the trainer (rollouts, verifier, the ledgered GRPO step in the actor, checkpoints chained step to
step), with the stand-in's transcripts re-tokenized and trained by REINFORCE, as the stats say.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rl_assets.testing.example_solutions import POLICY_MODEL, script
from rl_assets.testing.expectations import train_json
from rl_assets.testing.served_model import ServedModel
from rl_assets.workloads.grpo import checkpoint

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"
TASKS = ("create-file", "edit-config")
"""Two of the example tasks: two groups of two samples a step is GRPO's smallest batch with two groups."""


def test_train_with_the_grpo_trainer_chains_ledgered_checkpoints(home, stores, tmp_path):
    name = "grpo-tasks"
    tasks = tmp_path / "tasks"
    for task in TASKS:
        shutil.copytree(EXAMPLES / task, tasks / task)
    with ServedModel(script(), tmp_path) as server:
        result = train_json(
            home,
            *("--experiment", name, "--tasks", str(tasks), "--policy-url", server.base_url),
            *("--policy-model", POLICY_MODEL, "--steps", "2", "--samples", "2", "--max-turns", "8"),
            *("--trainer", "grpo", "--model", "tiny", "--lr", "0.01"),
        )
    assert [s["mean_reward"] for s in result["steps"]] == [1.0, 1.0]
    rows = stores.training.steps(name, "task-done")
    assert [r.step for r in rows] == [0, 1] and rows[1].parent_hash == rows[0].policy_hash
    policies = [stores.checkpoints.load(name, "task-done", r.step, expected_hash=r.policy_hash) for r in rows]
    for step, policy in enumerate(policies):
        assert policy.lm is not None and policy.version == step + 1
        saved = checkpoint.read(stores.artifacts.root / "models", policy.lm.checkpoint)
        assert saved.state["step"] == step + 1 and saved.state["parent_hash"] == rows[step].parent_hash
        assert policy.lm.stats.token_source == "retokenized" and policy.lm.stats.objective == "reinforce"
        assert policy.lm.stats.groups == len(TASKS) and policy.lm.stats.samples > 2 * len(TASKS)
