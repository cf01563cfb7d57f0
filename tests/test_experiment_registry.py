"""The experiment registry on Postgres: what makes an experiment the same one when it is resumed.

The model, its sampling and every other field are identity (another value, another experiment: refused);
where the models are served and which stored key each is presented are deployment (a server that moved to
another port resumes the experiment, which then asks it there).
"""

from __future__ import annotations

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import Runtime
from rl_assets.stores.experiments import ExperimentConflictError

TASK_FIELDS = {
    "tasks": "/tasks",
    "task_worlds": {"create-file": "task-create-file-0123"},
    "policy_url": "http://127.0.0.1:18431/v1",
    "policy_model": "smollm2",
    "judge_url": "http://127.0.0.1:18431/v1",
    "judge_model": "smollm2",
}


def test_a_moved_server_or_renamed_key_resumes_the_experiment_and_is_asked_there(stores) -> None:
    first = ExperimentConfig(name="moved-server", steps=1, **TASK_FIELDS)
    assert stores.experiments.create_or_resume(first, Runtime()) is True
    moved = first.model_copy(
        update={"policy_url": "http://127.0.0.1:18432/v1", "judge_url": "http://127.0.0.1:18433/v1"}
    )
    renamed = ExperimentConfig.model_validate({**moved.model_dump(), "policy_key_name": "vllm"})
    assert stores.experiments.create_or_resume(renamed, Runtime()) is False
    recorded = stores.experiments.get("moved-server")
    assert (recorded.policy_url, recorded.judge_url) == ("http://127.0.0.1:18432/v1", "http://127.0.0.1:18433/v1")
    assert recorded.policy_key_name == "vllm" and recorded.identity_hash == first.identity_hash


@pytest.mark.parametrize(
    ("field", "value"),
    [("policy_model", "qwen3"), ("judge_model", "qwen3"), ("policy_temperature", 0.7), ("judge_max_tokens", 64)],
)
def test_another_model_or_sampling_is_another_experiment(stores, field: str, value: object) -> None:
    name = f"identity-{field.replace('_', '-')}"
    stores.experiments.create_or_resume(ExperimentConfig(name=name, steps=1, **TASK_FIELDS), Runtime())
    changed = ExperimentConfig.model_validate({"name": name, "steps": 1, **TASK_FIELDS, field: value})
    with pytest.raises(ExperimentConflictError, match=f"different configuration \\({field}: "):
        stores.experiments.create_or_resume(changed, Runtime())
