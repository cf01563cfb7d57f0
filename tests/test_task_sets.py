"""Task experiments: the task set is validated, snapshotted into the home, and planned as trials of its tasks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.tasks.snapshot import TaskSetError, record_task_set, with_recorded_task_set
from rl_assets.worlds.local import LocalWorlds

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"
URL = "http://127.0.0.1:9/v1"


def _task_config(tasks: Path, **extra: object) -> ExperimentConfig:
    return ExperimentConfig(name="t", tasks=str(tasks), policy_url=URL, policy_model="m", **extra)


def test_a_task_set_is_snapshotted_read_only_and_planned_task_by_task(tmp_path):
    config = with_recorded_task_set(_task_config(EXAMPLES, samples=2), tmp_path / "tasks")
    assert config.workload == "tasks" and config.judge == "none" and config.trainer == "none"
    assert config.task_names == ["create-file", "edit-config", "fix-python-function", "hidden-test"]
    assert config.trial_slots()[:2] == ["create-file-n0", "create-file-n1"]
    specs = config.trials(3)
    assert [s.trial_id for s in specs][:3] == ["s3-create-file-n0", "s3-create-file-n1", "s3-edit-config-n0"]
    assert {s.world_id for s in specs} == set(config.world_ids) == set(config.task_worlds.values())
    for world_id in config.world_ids:
        snapshot = tmp_path / "tasks" / world_id
        assert (snapshot / "instruction.md").is_file()
        assert not any(p.stat().st_mode & 0o222 for p in [snapshot, *snapshot.rglob("*")])


def test_editing_any_file_of_a_task_makes_another_task_and_so_another_config(tmp_path):
    source = tmp_path / "set"
    shutil.copytree(EXAMPLES, source)
    before = with_recorded_task_set(_task_config(source), tmp_path / "tasks")
    (source / "hidden-test" / "tests" / "test_slug.py").write_text("raise SystemExit(0)\n")
    after = with_recorded_task_set(_task_config(source), tmp_path / "tasks")
    assert before.task_worlds["hidden-test"] != after.task_worlds["hidden-test"]
    assert before.task_worlds["create-file"] == after.task_worlds["create-file"]
    assert before.config_hash != after.config_hash  # resuming with an edited task set is refused as a changed config


def test_a_bad_task_set_is_refused_with_every_problem_and_nothing_recorded(tmp_path):
    source = tmp_path / "set"
    shutil.copytree(EXAMPLES, source)
    (source / "create-file" / "tests" / "test.sh").unlink()
    shutil.copytree(source / "edit-config", source / "Bad Name")
    (source / "fix-python-function" / "environment" / "link").symlink_to("/etc/hostname")
    with pytest.raises(TaskSetError) as err:
        record_task_set(source, tmp_path / "tasks")
    text = str(err.value)
    assert "create-file/tests/test.sh: missing" in text
    assert "Bad Name: the directory's name" in text
    assert "symbolic link" in text
    assert not (tmp_path / "tasks").exists()


def test_a_task_world_is_its_environment_sealed(tmp_path):
    config = with_recorded_task_set(_task_config(EXAMPLES / "edit-config"), tmp_path / "tasks")
    (world_id,) = config.world_ids
    worlds = LocalWorlds(tmp_path / "worlds", tmp_path / "forks", tmp_path / "tasks")
    digest, built = worlds.ensure_built(world_id)
    assert built and worlds.verified_hash(world_id) == digest
    files = sorted(p.name for p in worlds.world_dir(world_id).rglob("*"))
    assert files == ["config.json"]  # the environment only: no tests, no solution, no instruction


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"policy_url": URL}, "apply to task experiments only"),
        ({"workload": "tasks"}, "needs --tasks"),
        ({"tasks": "/x"}, "needs --policy-url and --policy-model"),
        ({"tasks": "/x", "policy_url": "http://h/api", "policy_model": "m"}, "ending in /v1"),
        ({"tasks": "/x", "policy_url": URL, "policy_model": "m", "judge": "maybe"}, "judge"),
    ],
)
def test_task_fields_are_checked_by_the_schema(fields, problem):
    with pytest.raises(ValidationError, match=problem):
        ExperimentConfig(name="t", **fields)


def test_a_reference_config_dumps_exactly_as_before_the_task_fields_existed():
    dumped = ExperimentConfig(name="ref").model_dump(mode="json")
    assert set(dumped) == {
        "name", "steps", "worlds", "prompts", "samples", "lr", "max_turns", "rubric",
        "generate_retries", "judge_retries", "failed_trial_policy", "workload",
    }  # fmt: skip
