"""SkyRL's checks of a generator's output, transcribed, so a test can hold an export to them without SkyRL.

From NovaSky-AI/SkyRL at commit a9564572eb8e (``skyrl`` 0.3.0), ``skyrl/train/utils/trainer_utils.py``:
``validate_generator_output`` and ``_validate_step_wise_fields``, check for check, on the JSON form
(a ``TrajectoryID`` is ``{"instance_id", "repetition_id"}`` and keys as its ``to_string`` does). Only
its warning (every loss mask 0) is left out. It imports nothing of the package (an import contract keeps
it so): an export bug cannot pass by sharing this module's mistakes.
"""

from __future__ import annotations

from typing import Any

PER_RESPONSE = (
    "response_ids",
    "loss_masks",
    "rewards",
    "rollout_logprobs",
    "stop_reasons",
    "trajectory_ids",
    "rollout_expert_indices",
    "is_last_step",
    "pixel_values",
    "image_grid_thw",
)
"""The fields SkyRL requires, when they are lists, to have one entry per response."""


def _key(trajectory_id: Any) -> str:
    if isinstance(trajectory_id, dict):
        return f"{trajectory_id['instance_id']}_{trajectory_id['repetition_id']}"
    return str(trajectory_id)


def validate_generator_output(num_prompts: int, output: dict[str, Any], step_wise: bool = False) -> None:
    """Raise ``AssertionError`` (``RuntimeError`` for an empty output) where SkyRL's validator would."""
    if len(output["response_ids"]) <= 0:
        raise RuntimeError("No outputs generated")
    num_responses = len(output["response_ids"])
    if not step_wise:
        assert num_prompts == num_responses, f"Mismatch between prompts ({num_prompts}) and responses"
    assert num_responses == len(output["prompt_token_ids"]), "Mismatch between responses and prompt_token_ids"
    for key, value in output.items():
        if isinstance(value, list) and key in PER_RESPONSE:
            assert len(value) == num_responses, f"{key} has {len(value)} entries, response_ids {num_responses}"
    for i, (response, mask, reward) in enumerate(
        zip(output["response_ids"], output["loss_masks"], output["rewards"], strict=False)
    ):
        assert len(response) == len(mask), f"sample {i}: {len(response)} response ids, {len(mask)} loss mask entries"
        if isinstance(reward, list):
            assert len(reward) == len(response), f"sample {i}: {len(reward)} token rewards, {len(response)} ids"
        if output["rollout_logprobs"]:
            logprobs = output["rollout_logprobs"][i]
            assert len(response) == len(logprobs), f"sample {i}: {len(response)} ids, {len(logprobs)} logprobs"
    rewards = output["rewards"]
    per_token = isinstance(rewards[0], list)
    assert all(isinstance(r, list) == per_token for r in rewards), "rewards must be List[float] or List[List[float]]"
    if step_wise:
        _validate_step_wise_fields(output, num_responses)


def _validate_step_wise_fields(output: dict[str, Any], num_responses: int) -> None:
    assert output.get("is_last_step") is not None, "step_wise=True but `is_last_step` is missing"
    assert output.get("trajectory_ids") is not None, "step_wise=True but `trajectory_ids` is missing"
    is_last_step = output["is_last_step"]
    keys = [_key(t) for t in output["trajectory_ids"]]
    assert len(is_last_step) == num_responses, "is_last_step must have one entry per response"
    assert len(keys) == num_responses, "trajectory_ids must have one entry per response"
    assert is_last_step[-1] is True, "is_last_step[-1] must be True"
    assert sum(1 for x in is_last_step if x) >= 1, "is_last_step must contain at least one True value"
    seen: set[str] = set()
    previous = None
    for i, key in enumerate(keys):
        if key != previous:
            assert key not in seen, f"non-contiguous trajectory {key!r} at index {i}"
            if previous is not None:
                seen.add(previous)
            previous = key
    for i in range(num_responses - 1):
        if keys[i] != keys[i + 1]:
            assert is_last_step[i] is True, f"trajectory boundary at index {i} but is_last_step[{i}] is not True"
        else:
            assert is_last_step[i] is not True, f"is_last_step[{i}] is True but trajectory {keys[i]!r} continues"
