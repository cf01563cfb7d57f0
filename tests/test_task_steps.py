"""Harbor's ``[[steps]]`` rules (:mod:`rl_assets.tasks.steps`): which step's settings apply, when a trial stops,
what it earned, and step names that cannot leave ``steps/``. Real task directories; the loop itself runs in real
containers in ``tests/test_harbor_cookbook.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_assets.domain.models import StepOutcome
from rl_assets.tasks import steps as rules
from rl_assets.tasks.task import InvalidTaskError, load_task

STEPS = """\
[verifier]
timeout_sec = 100.0
env = {SHARED = "task", BOTH = "task"}
[agent]
timeout_sec = 50.0
[[steps]]
name = "one"
min_reward = 1.0
[steps.verifier]
timeout_sec = 10.0
env = {BOTH = "step"}
[[steps]]
name = "two"
min_reward = {speed = 0.5}
[steps.agent]
timeout_sec = 5.0
"""


def _task(root: Path, toml: str = STEPS, names: tuple[str, ...] = ("one", "two")) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("FROM debian\n")
    (root / "task.toml").write_text(toml)
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text("exit 0\n")
    for name in names:
        step = root / "steps" / name
        (step / "solution").mkdir(parents=True)
        (step / "instruction.md").write_text(f"do {name}\n")
        (step / "solution" / "solve.sh").write_text("true\n")
    return root


def test_each_setting_is_the_steps_where_it_sets_one_else_the_tasks(tmp_path):
    task = load_task(_task(tmp_path / "t"))
    one, two = task.config.steps
    assert rules.verifier_settings(task, one) == (10.0, {"SHARED": "task", "BOTH": "step"}, None)
    assert rules.verifier_settings(task, two) == (100.0, {"SHARED": "task", "BOTH": "task"}, None)
    assert (rules.agent_timeout_s(task, one), rules.agent_timeout_s(task, two)) == (50.0, 5.0)
    assert task.has_solution and task.instruction == "Step 1 of 2 (one):\ndo one\n\n\nStep 2 of 2 (two):\ndo two\n"


def test_a_missed_min_reward_stops_the_trial_and_a_missing_key_counts_as_minus_infinity(tmp_path):
    one, two = load_task(_task(tmp_path / "t")).config.steps
    assert rules.min_reward_failure(one, {"reward": 1.0}) is None
    assert rules.min_reward_failure(one, {"reward": 0.99}) == "step 'one': reward = 0.99 is below its min_reward 1"
    assert rules.min_reward_failure(one, None) == "step 'one': reward = -inf is below its min_reward 1"
    assert rules.min_reward_failure(two, {"reward": 1.0}) == "step 'two': speed = -inf is below its min_reward 0.5"
    assert rules.min_reward_failure(two, {"speed": 0.5}) is None


def test_the_trials_rewards_are_per_key_means_over_verified_steps_or_the_last_steps(tmp_path):
    mean = load_task(_task(tmp_path / "mean"))
    final = load_task(_task(tmp_path / "final", 'multi_step_reward_strategy = "final"\n' + STEPS))
    outcomes = [
        StepOutcome(name="one", rewards={"reward": 1.0, "speed": 0.5}),
        StepOutcome(name="two", rewards={"reward": 0.0}),
        StepOutcome(name="three", error="StepSetupError: step 'three': workdir/setup.sh exited 1"),
    ]
    assert rules.trial_rewards(mean, outcomes) == {"reward": 0.5, "speed": 0.25}, "unverified steps not counted"
    assert rules.trial_rewards(final, outcomes) is None, "the last step reached has no rewards"
    assert rules.trial_rewards(final, outcomes[:2]) == {"reward": 0.0}
    assert rules.trial_rewards(mean, outcomes[2:]) is None


@pytest.mark.parametrize("name", ["../../etc", "a/b", ".hidden", "", "x" * 65])
def test_a_step_name_is_a_directory_name_never_a_path(tmp_path, name):
    toml = f'[[steps]]\nname = "{name}"\n'
    with pytest.raises(InvalidTaskError) as err:
        load_task(_task(tmp_path / "t", toml, names=()))
    assert any("steps" in problem and "name" in problem for problem in err.value.problems), err.value.problems


def test_step_names_are_unique_whatever_their_case(tmp_path):
    toml = '[[steps]]\nname = "Build"\n[[steps]]\nname = "build"\n'
    with pytest.raises(InvalidTaskError) as err:
        load_task(_task(tmp_path / "t", toml, names=("Build", "build")))
    assert any("step names must be unique" in problem for problem in err.value.problems), err.value.problems
