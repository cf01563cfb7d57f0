"""``rl-assets train --trainer grpo --model tiny`` end to end on the example tasks, answered by another server.

The agent is answered by the stand-in model server (``--policy-url``), not by the trained model (that is
``--policy local``: ``tests/test_policy_server.py``), so this shows the durable loop around the trainer
with another server's transcripts: rollouts, verifier, the ledgered GRPO step in the actor, checkpoints
chained step to step, the transcripts re-tokenized and trained by REINFORCE, as the stats say. The same
trained experiment (trained once, a module fixture) is then exported for SkyRL with ``rl-assets export``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rl_assets.workloads.grpo import checkpoint
from rl_assets_testkit.example_solutions import POLICY_MODEL, script
from rl_assets_testkit.expectations import run_cli, train_json
from rl_assets_testkit.served_model import ServedModel
from rl_assets_testkit.skyrl_validator import validate_generator_output

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"
TASKS = ("create-file", "edit-config")
"""Two of the example tasks: two groups of two samples a step is GRPO's smallest batch with two groups."""


NAME = "grpo-tasks"
TOOL = 256 + 6
"""The byte tokenizer's ``<|tool|>`` token: tool output is in a later call's prompt, never in a response."""


@pytest.fixture(scope="module")
def trained(home, tmp_path_factory) -> dict:
    """The experiment trained once (two steps) for every test here: ``train --json``'s result."""
    tmp = tmp_path_factory.mktemp("grpo")
    tasks = tmp / "tasks"
    for task in TASKS:
        shutil.copytree(EXAMPLES / task, tasks / task)
    with ServedModel(script(), tmp) as server:
        return train_json(
            home,
            *("--experiment", NAME, "--tasks", str(tasks), "--policy-url", server.base_url),
            *("--policy-model", POLICY_MODEL, "--steps", "2", "--samples", "2", "--max-turns", "8"),
            *("--trainer", "grpo", "--model", "tiny", "--lr", "0.01"),
        )


def test_train_with_the_grpo_trainer_chains_ledgered_checkpoints(stores, trained):
    assert [s["mean_reward"] for s in trained["steps"]] == [1.0, 1.0]
    rows = stores.training.steps(NAME, "task-done")
    assert [r.step for r in rows] == [0, 1] and rows[1].parent_hash == rows[0].policy_hash
    policies = [stores.checkpoints.load(NAME, "task-done", r.step, expected_hash=r.policy_hash) for r in rows]
    for step, policy in enumerate(policies):
        assert policy.lm is not None and policy.version == step + 1
        saved = checkpoint.read(stores.artifacts.root / "models", policy.lm.checkpoint)
        assert saved.state["step"] == step + 1 and saved.state["parent_hash"] == rows[step].parent_hash
        assert policy.lm.stats.token_source == "retokenized" and policy.lm.stats.objective == "reinforce"
        assert policy.lm.stats.groups == len(TASKS) and policy.lm.stats.samples > 2 * len(TASKS)


def _export(home, *args: str) -> dict:
    return json.loads(run_cli(home, "export", "--experiment", NAME, "--format", "skyrl", *args).stdout)


def test_export_skyrl_writes_each_model_call_as_a_step_of_skyrls_generator_output(home, stores, trained, tmp_path):
    out = tmp_path / "skyrl.json"
    run_cli(home, "export", "--experiment", NAME, "--format", "skyrl", "--out", str(out))
    output = json.loads(out.read_text())
    config = stores.experiments.get(NAME)
    specs = [spec for step in (0, 1) for spec in config.trials(step)]
    validate_generator_output(len(specs), output, step_wise=True)
    calls = [stores.trials.trajectory(NAME, s.step, s.trial_id.split("-", 1)[1]).model_calls for s in specs]
    n = sum(calls)
    assert n > len(specs) and all(len(v) == n for v in output.values() if isinstance(v, list))
    assert output["rollout_logprobs"] is None  # the stand-in's transcripts: re-tokenized, so no sampling logprobs
    for i, response in enumerate(output["response_ids"]):
        assert len(output["loss_masks"][i]) == len(output["rewards"][i]) == len(response) > 0
        assert set(output["loss_masks"][i]) == {1} and TOOL not in response
        first = i == 0 or output["is_last_step"][i - 1]
        assert first or TOOL in output["prompt_token_ids"][i]  # a later call's prompt holds the tool output
    ids = [f"{t['instance_id']}-n{t['repetition_id']}" for t in output["trajectory_ids"]]
    assert ids == [s.trial_id for s, k in zip(specs, calls, strict=True) for _ in range(k)]
    stored = [stores.trials.reward(NAME, "task-done", s.step, s.trial_id.split("-", 1)[1]).reward for s in specs]
    finals = [r[-1] for r, last in zip(output["rewards"], output["is_last_step"], strict=True) if last]
    assert finals == stored and sum(map(sum, output["rewards"])) == sum(stored)

    one = _export(home, "--step", "1")
    rows = [i for i, t in enumerate(output["trajectory_ids"]) if t["instance_id"].startswith("s1-")]
    assert one == {k: v if not isinstance(v, list) else [v[i] for i in rows] for k, v in output.items()}


@pytest.mark.parametrize(
    "args, message",
    [
        (("--experiment", "no-such", "--format", "skyrl"), "--experiment: "),
        (("--experiment", NAME, "--format", "skyrl", "--step", "2"), "--step: experiment 'grpo-tasks' has trained"),
    ],
)
def test_export_refuses_on_one_line(home, trained, args, message):
    proc = run_cli(home, "export", *args, check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rl-assets: error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and message in errors[0], proc.stderr
    assert proc.stdout == ""
