"""Every input path is checked by the one schema before any work: one line, exit 2, nothing recorded.

CLI flags, rubric files, experiment and rubric names, environment variables
(through the real CLI, in a fresh home that must stay untouched: refused
before Postgres starts), and the launchpad's three jobs (through Dagster's
real config system and the job's op, against the session's home).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from rl_assets.definitions import defs
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.names import InvalidNameError
from rl_assets.domain.run_tags import RUBRIC_TAG, rubric_of
from rl_assets.domain.runtime import Runtime
from rl_assets.stores.rubrics import RubricError, RubricRegistry

SECRET = "TOPSECRET-7f3a"
"""Planted in files that are refused: no error message may echo a file's contents."""
GOOD = {"name": "fine", "correctness_weight": 1.0, "efficiency_weight": 0.5, "tidiness_weight": 0.2}


def _cli(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def _refused_in_one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rl-assets: error: "), proc.stderr
    assert SECRET not in proc.stderr
    return lines[0]


TRAIN = ["train", "--experiment", "bad"]
BAD_CLI = [
    (TRAIN + ["--lr", "inf"], "--lr: Input should be a finite number (got inf)"),
    (TRAIN + ["--lr", "nan"], "--lr: Input should be a finite number (got nan)"),
    (TRAIN + ["--lr", "-1"], "--lr: Input should be greater than or equal to 0 (got -1.0)"),
    (TRAIN + ["--lr", "1e300"], "--lr: Input should be less than or equal to 1000"),
    (TRAIN + ["--steps", str(10**9)], "--steps: Input should be less than or equal to 100000 (got 1000000000)"),
    (TRAIN + ["--worlds", "20000"], "--worlds: Input should be less than or equal to 10000"),
    (TRAIN + ["--prompts", "10001"], "--prompts: Input should be less than or equal to 10000"),
    (TRAIN + ["--samples", str(10**6)], "--samples: Input should be less than or equal to 10000"),
    (TRAIN + ["--prompts", "1000", "--samples", "1000"], "prompts x samples (trials per step) must be at most"),
    (TRAIN + ["--max-turns", "5000"], "--max-turns: Input should be less than or equal to 1000"),
    (TRAIN + ["--generate-retries", "1000"], "--generate-retries: Input should be less than or equal to 100"),
    (TRAIN + ["--judge-retries", "-1"], "--judge-retries: Input should be greater than or equal to 0"),
    (TRAIN + ["--trial-timeout", "inf"], "--trial-timeout: Input should be a finite number (got inf)"),
    (TRAIN + ["--trial-timeout", "1e6"], "--trial-timeout: Input should be less than or equal to 86400"),
    (TRAIN + ["--judge-timeout", "1e300"], "--judge-timeout: Input should be less than or equal to 86400"),
    (TRAIN + ["--judge-timeout", "nan"], "--judge-timeout: Input should be a finite number"),
    (TRAIN + ["--tool-latency", "7200"], "--tool-latency: Input should be less than or equal to 3600"),
    (TRAIN + ["--judge-latency", "inf"], "--judge-latency: Input should be a finite number"),
    (TRAIN + ["--flaky-trial-rate", "nan"], "--flaky-trial-rate: Input should be a finite number"),
    (TRAIN + ["--max-concurrent-trials", "100000"], "--max-concurrent-trials: Input should be less than or equal to"),
    (TRAIN + ["--crash-driver-at-step", str(10**9)], "--crash-driver-at-step: Input should be less than or equal to"),
    (TRAIN + ["--failed-trial-policy", "drop"], "argument --failed-trial-policy: invalid choice: 'drop'"),
    (TRAIN + ["--rubric", "../x"], "--rubric: must be 1 to 64 letters, digits, '_', '.' or '-', starting with"),
    (TRAIN + ["--rubric", "a/b"], "--rubric: must be 1 to 64 letters"),
    (TRAIN + ["--rubric", "/etc/passwd"], "--rubric: must be 1 to 64 letters"),
    (["train", "--experiment", "a/b"], "--experiment: must be 1 to 40 lowercase letters"),
    (["train", "--experiment", "../x"], "--experiment: must be 1 to 40 lowercase letters"),
    (["fork", "--from", "ref", "--experiment", "a/b", "--rubric", "v1"], "--experiment: must be 1 to 40"),
    (["fork", "--from", "../ref", "--experiment", "x", "--rubric", "v1"], "--from: must be 1 to 40"),
    (["fork", "--from", "ref", "--experiment", "x", "--rubric", "../v1"], "--rubric: must be 1 to 64"),
    (["rescore", "--experiment", "ref", "--rubric", "../../x"], "--rubric: must be 1 to 64"),
    (["rescore", "--experiment", "a/b", "--rubric", "v1"], "--experiment: must be 1 to 40"),
    (["status", "--experiment", "a/b"], "--experiment: must be 1 to 40"),
    (["report", "--experiment", "a/b"], "--experiment: must be 1 to 40"),
]


@pytest.mark.parametrize("args, message", BAD_CLI, ids=[" ".join(a[1:]) for a, _ in BAD_CLI])
def test_a_bad_flag_is_refused_before_any_work(tmp_path, args, message):
    home = tmp_path / "home"
    line = _refused_in_one_line(_cli(home, *args))
    assert message in line
    assert not home.exists(), "refused before the home (or its Postgres) was created"


BAD_ENV = [
    ({"RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE": "abc"}, "RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE must be a whole number"),
    ({"RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE": "0"}, "RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE must be at least 1"),
    ({"RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE": "1e9"}, "RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE must be a whole number"),
    ({"RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE": str(10**9)}, "RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE must be at most"),
    ({"RL_ASSETS_RESCORE_EXPERIMENTS": "ref,../x"}, "RL_ASSETS_RESCORE_EXPERIMENTS must list experiment names"),
    ({"RL_ASSETS_RESCORE_EXPERIMENTS": "*,ref"}, "or be '*' alone; '*' is not one (got '*,ref')"),
    ({"RL_ASSETS_ENV": "k8s"}, "RL_ASSETS_ENV must be 'local' or 'kubernetes' (got 'k8s')"),
    ({"RL_ASSETS_K8S_NAMESPACE": "Bad_NS"}, "RL_ASSETS_K8S_NAMESPACE must be a Kubernetes name"),
    ({"RL_ASSETS_RUNTIME_BASE": "tmp"}, "RL_ASSETS_RUNTIME_BASE must be an absolute path (got 'tmp')"),
    ({"RL_ASSETS_CONTAINER_RUNTIME": "nerdctl"}, "RL_ASSETS_CONTAINER_RUNTIME must be 'podman', 'docker' or an"),
    ({"RL_ASSETS_RAY_ADDRESS": "auto"}, "RL_ASSETS_RAY_ADDRESS must be HOST:PORT or ray://HOST:PORT (got 'auto')"),
    ({"RL_ASSETS_POD_NAME": "Step_Pod"}, "RL_ASSETS_POD_NAME must be a Kubernetes object name"),
    ({"RL_ASSETS_POD_UID": "uid-1"}, "RL_ASSETS_POD_UID must be a Kubernetes uid (a lowercase UUID) (got 'uid-1')"),
]


@pytest.mark.parametrize("env, message", BAD_ENV, ids=[f"{k}={v}" for e, _ in BAD_ENV for k, v in e.items()])
def test_a_bad_environment_variable_is_refused_naming_it(tmp_path, env, message):
    home = tmp_path / "home"
    line = _refused_in_one_line(_cli(home, "train", "--experiment", "ok", env=env))
    assert message in line
    assert not home.exists()


_WEIGHTS = '"efficiency_weight": 0.5, "tidiness_weight": 0.2'


def _weighing(correctness: str) -> str:
    """A rubric file's text whose correctness weight is the raw JSON token ``correctness``."""
    return f'{{"name": "r", "correctness_weight": {correctness}, {_WEIGHTS}}}'


BAD_FILES = [
    (_weighing("Infinity"), "r.json: not JSON (Infinity is not a JSON number)"),
    (_weighing("NaN"), "r.json: not JSON (NaN is not a JSON number)"),
    (_weighing("-Infinity"), "r.json: not JSON (-Infinity is not a JSON number)"),
    (_weighing("1e999"), "r.json: correctness_weight: Input should be a finite number"),
    (_weighing("1e300"), "r.json: correctness_weight: Input should be less than or equal to 1000"),
    (_weighing(str(10**400)), "r.json: correctness_weight: Input should be a valid number"),
    (_weighing(f'"{SECRET}"'), "r.json: correctness_weight: Input should be a valid number"),
    (f"{SECRET} is not json", "r.json: not JSON (Expecting value at line 1, column 1)"),
    (f'["{SECRET}"]', "r.json: must be a JSON object with the fields name, correctness_weight"),
    (f'"{SECRET}"', "r.json: must be a JSON object"),
    (f'{{"name": "{SECRET}/..", "correctness_weight": 1, {_WEIGHTS}}}', "r.json: name: must be 1 to 64 letters"),
    (f'{{"name": "r", "colour": "{SECRET}", "correctness_weight": 1, {_WEIGHTS}}}', "r.json: colour: Extra inputs"),
    (" " * (70 * 1024), "r.json: larger than 65536 bytes; not a rubric file"),
]


def _ids(cases: list[tuple[object, str]]) -> list[str]:
    return [f"{i}-{message.split(': ', 1)[-1][:40]}" for i, (_, message) in enumerate(cases)]


@pytest.mark.parametrize("body, message", BAD_FILES, ids=_ids(BAD_FILES))
def test_a_bad_rubric_file_is_refused_naming_the_file_and_the_problem(tmp_path, body, message):
    source = tmp_path / "r.json"
    source.write_text(body)
    home = tmp_path / "home"
    line = _refused_in_one_line(_cli(home, "rubrics", "--add", str(source)))
    assert line.startswith(f"rl-assets: error: --add: {message}")
    assert not home.exists(), "a bad file alone is refused before any service starts"

    # The same file in a fresh home's registry, used by name: refused before Postgres starts.
    (home / "rubrics").mkdir(parents=True)
    (home / "rubrics" / "r.json").write_text(body)
    line = _refused_in_one_line(_cli(home, "train", "--experiment", "ok", "--rubric", "r"))
    assert line.startswith(f"rl-assets: error: --rubric: {message}")
    assert sorted(p.name for p in home.iterdir()) == ["rubrics"], "no service was started, nothing recorded"


def test_a_non_utf8_rubric_file_is_refused_without_its_bytes(tmp_path):
    source = tmp_path / "r.json"
    source.write_bytes(b'{"name": "r", "x": "\xff\xfe' + SECRET.encode() + b'"}')
    line = _refused_in_one_line(_cli(tmp_path / "home", "rubrics", "--add", str(source)))
    assert line == "rl-assets: error: --add: r.json: not readable as UTF-8 text (UnicodeDecodeError)"


def test_a_rubric_name_is_checked_before_it_names_a_file(home, stores):
    """A real traversal: a valid rubric file outside the registry folder, reached by ``../``."""
    outside = home / "outside.json"
    outside.write_text(json.dumps({**GOOD, "name": "outside"}))
    try:
        for name in ("../outside", "rubrics/../../outside", "/tmp/x", "", "a\nb", "x" * 65):
            with pytest.raises(RubricError, match="must be 1 to 64 letters"):
                stores.rubrics.get(name)
        with pytest.raises(InvalidNameError, match=f"run tag {RUBRIC_TAG}: must be 1 to 64 letters"):
            rubric_of({RUBRIC_TAG: "../outside"}, "v1")
        assert rubric_of({}, "v1") == "v1" and rubric_of({RUBRIC_TAG: "v2-efficiency"}, "v1") == "v2-efficiency"
        with pytest.raises(RubricError, match="must be 1 to 64 letters"):
            RubricRegistry(home / "rubrics").get("../outside")
    finally:
        outside.unlink()


# The launchpad: the same schema, through Dagster's config system and each job's op.

_BAD_START = [
    ({"lr": float("inf")}, "lr: Input should be a finite number"),
    ({"lr": float("nan")}, "lr: Input should be a finite number"),
    ({"lr": -1.0}, "lr: Input should be greater than or equal to 0"),
    ({"steps": 10**9}, "steps: Input should be less than or equal to 100000"),
    ({"samples": 10**6}, "samples: Input should be less than or equal to 10000"),
    ({"max_turns": 10**6}, "max_turns: Input should be less than or equal to 1000"),
    ({"generate_retries": 10**6}, "generate_retries: Input should be less than or equal to 100"),
    ({"prompts": 1000, "samples": 1000}, "prompts x samples (trials per step) must be at most 100000"),
    ({"trial_timeout_s": float("inf")}, "trial_timeout_s: Input should be a finite number"),
    ({"judge_timeout_s": 1e300}, "judge_timeout_s: Input should be less than or equal to 86400"),
    ({"tool_latency_s": 1e9}, "tool_latency_s: Input should be less than or equal to 3600"),
    ({"hang_trial_rate": float("nan")}, "hang_trial_rate: Input should be a finite number"),
    ({"rubric": "../x"}, "rubric: must be 1 to 64 letters"),
    ({"rubric": "a/b"}, "rubric: must be 1 to 64 letters"),
    ({"rubric": "nosuch"}, "rubric: unknown rubric 'nosuch'"),
    ({"rubric": "lpinf"}, "rubric: lpinf.json: not JSON (Infinity is not a JSON number)"),
    ({"name": "a/b"}, "name: must be 1 to 40 lowercase letters"),
    ({"workload": "../x"}, "workload: must be 1 to 40 lowercase letters"),
    ({"workload": "nosuch"}, "workload: no workload named 'nosuch' (registered: reference, tasks)"),
]


@pytest.fixture
def infinite_rubric_file(home: Path):
    """A rubric file in the session's registry that holds ``Infinity`` (removed afterwards)."""
    path = home / "rubrics" / "lpinf.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'{{"name": "lpinf", "correctness_weight": Infinity, {_WEIGHTS}, "note": "{SECRET}"}}')
    yield path
    path.unlink()


def _failure(job_name: str, op: str, config: dict, instance) -> str:
    job = defs.resolve_job_def(job_name)
    run_config = {"ops": {op: {"config": config}}}
    assert dg.validate_run_config(job, run_config), "the value passes Dagster's schema; the op's check refuses it"
    result = job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message.strip()
    assert len(message.splitlines()) == 1 and SECRET not in message, message
    return message


@pytest.mark.parametrize("fields, message", _BAD_START, ids=_ids(_BAD_START))
def test_the_launchpad_refuses_a_bad_start_config_and_records_nothing(
    home, stores, instance, infinite_rubric_file, fields, message
):
    name = fields.get("name", "lp-bad")
    before = stores.experiments.names()
    failure = _failure("start_experiment_job", "start_experiment", {"name": "lp-bad", **fields}, instance)
    assert f"invalid config: {message}" in failure, failure
    assert stores.experiments.names() == before and name not in before


EXAMPLE_TASKS = Path(__file__).resolve().parents[1] / "examples" / "tasks"
_SERVED = {"policy_url": "http://127.0.0.1:9/v1", "policy_model": "m"}


@pytest.fixture
def owner_rules(home: Path, tmp_path_factory):
    """The owner allows the examples' task set, a directory ``allowed`` and loopback servers; ``allowed/escape``
    is a link to a directory it does not allow. The rules file is removed afterwards."""
    base = Path(tmp_path_factory.mktemp("rules"))
    (base / "outside").mkdir()
    allowed = base / "allowed"
    allowed.mkdir()
    (allowed / "escape").symlink_to(base / "outside")
    rules = home / "launchpad.toml"
    rules.write_text(f'task_dirs = ["{allowed}", "{EXAMPLE_TASKS}"]\nhosts = ["127.0.0.1"]\n')
    yield allowed
    rules.unlink()


_REFUSED_BY_RULES = [
    ({"tasks": "{allowed}/escape", **_SERVED}, "tasks: {allowed}/escape is not under a directory the owner allows"),
    ({"tasks": "{allowed}/../outside", **_SERVED}, "tasks: {allowed}/../outside is not under a directory the owner"),
    (
        {"tasks": str(EXAMPLE_TASKS), "policy_url": "http://attacker.example:8000/v1", "policy_model": "m"},
        "policy_url: host attacker.example is not one the owner allows",
    ),
    ({"tasks": str(EXAMPLE_TASKS), **_SERVED, "policy_key_name": "nosuch"}, "policy_key_name: no API key named"),
]


@pytest.mark.parametrize(
    "fields, message", _REFUSED_BY_RULES, ids=["link-out", "dot-dot", "foreign-host", "missing-key"]
)
def test_the_launchpad_holds_a_run_to_the_owners_rules(home, stores, instance, owner_rules, fields, message):
    before = stores.experiments.names()
    fields = {**fields, "tasks": fields["tasks"].format(allowed=owner_rules)}
    failure = _failure("start_experiment_job", "start_experiment", {"name": "lp-rules", **fields}, instance)
    assert f"invalid config: {message.format(allowed=owner_rules)}" in failure, failure
    assert stores.experiments.names() == before


_BAD_FORK = [
    ({"parent": "a/b"}, "parent: must be 1 to 40 lowercase letters"),
    ({"name": "../x"}, "name: must be 1 to 40 lowercase letters"),
    ({"rubric": "../x"}, "rubric: must be 1 to 64 letters"),
    ({"rubric": "lpinf"}, "rubric: lpinf.json: not JSON (Infinity is not a JSON number)"),
    ({"parent": "nosuch"}, "parent: no experiment named 'nosuch'"),
]


@pytest.fixture
def lp_parent(stores) -> str:
    stores.experiments.create_or_resume(ExperimentConfig(name="lp-parent", steps=1), Runtime())
    return "lp-parent"


@pytest.mark.parametrize("fields, message", _BAD_FORK, ids=_ids(_BAD_FORK))
def test_the_launchpad_refuses_a_bad_fork_config_and_records_nothing(
    home, stores, instance, infinite_rubric_file, lp_parent, fields, message
):
    before = stores.experiments.names()
    config = {"parent": lp_parent, "name": "lp-fork", "rubric": "v2-efficiency", **fields}
    assert f"invalid config: {message}" in _failure("fork_experiment_job", "fork_experiment", config, instance)
    assert stores.experiments.names() == before


_BAD_RESCORE = [
    ({"experiment": "../x"}, "experiment: must be 1 to 40 lowercase letters"),
    ({"rubric": "../../etc/x"}, "rubric: must be 1 to 64 letters"),
    ({"rubric": "lpinf"}, "rubric: lpinf.json: not JSON (Infinity is not a JSON number)"),
]


@pytest.mark.parametrize("fields, message", _BAD_RESCORE, ids=_ids(_BAD_RESCORE))
def test_the_launchpad_refuses_a_bad_rescore_config_and_records_nothing(
    home, stores, instance, infinite_rubric_file, lp_parent, fields, message
):
    config = {"experiment": lp_parent, "rubric": "v2-efficiency", **fields}
    assert f"invalid config: {message}" in _failure("rescore_experiment_job", "rescore_experiment", config, instance)
    assert stores.scorings.requested(lp_parent) == []


def test_a_rollout_run_that_would_neither_roll_out_nor_judge_is_refused_by_its_config():
    """``judge_only`` and ``rollout_only`` together would do nothing: the run's config says why, before any trial."""
    from rl_assets.assets.rollout_batches import RolloutBatchConfig

    with pytest.raises(ValueError, match="judge_only or rollout_only, not both"):
        RolloutBatchConfig(trials=["ref/s0|p0-n0"], judge_only=True, rollout_only=True)
    assert RolloutBatchConfig(trials=["ref/s0|p0-n0"], rollout_only=True).rollout_only
