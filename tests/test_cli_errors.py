"""Bad arguments fail before any work: one line, non-zero exit, nothing created."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "args, message",
    [
        (["--worlds", "0"], "--worlds: Input should be greater than or equal to 1"),
        (["--samples", "-2"], "--samples: Input should be greater than or equal to 1"),
        (["--steps", "-1"], "--steps: Input should be greater than or equal to 1"),
        (["--rubric", "v9"], "--rubric: unknown rubric 'v9' (known: task-done, v1, v2-efficiency)"),
        (["--flaky-trial-rate", "1.5"], "--flaky-trial-rate: Input should be less than or equal to 1"),
        (["--judge-flake-rate", "-0.2"], "--judge-flake-rate: Input should be greater than or equal to 0"),
        (["--hang-trial-rate", "abc"], "argument --hang-trial-rate: invalid float value: 'abc'"),
        (["--trial-timeout", "0"], "--trial-timeout: Input should be greater than 0"),
        (["--crash-driver-at-step", "3"], "--crash-driver-at-step: must be below --steps (3)"),
        (["--workload", "nope"], "--workload: no workload named 'nope' (registered: reference, tasks)"),
        (["--workload", "Ref"], "--workload: must be 1 to 40 lowercase letters, digits or '-', starting with a letter"),
    ],
)
def test_bad_arguments_fail_fast_with_one_line(tmp_path, args, message):
    home = tmp_path / "home"
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", "train", "--experiment", "bad", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rl-assets: error: ") and message in lines[0], proc.stderr
    assert not home.exists(), "no work (not even the home) before the arguments are valid"


def test_bad_experiment_name_is_rejected(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", "train", "--experiment", "a|b", "--home", str(tmp_path / "h")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "rl-assets: error: --experiment: must be 1 to 40 lowercase letters, digits, '_' or '-', "
        "starting with a letter or digit (got 'a|b')"
    )


@pytest.mark.parametrize(
    "command", ["train", "rescore", "fork", "rubrics", "status", "report", "export", "dev", "doctor", "stop", "tasks"]
)
def test_every_command_prints_its_help(command):
    """Help texts come from the config models' descriptions; one with a bare ``%`` once crashed ``--help``."""
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", command, "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"usage: rl-assets {command}")


def test_train_ends_by_saying_where_to_look_next_on_stderr(capsys):
    from rl_assets.cli.commands import _next_steps, build_parser
    from rl_assets.domain.experiment import ExperimentConfig

    args = build_parser().parse_args(["train", "--experiment", "demo", "--home", "/tmp/my home"])
    _next_steps(args, ExperimentConfig(name="demo"))
    out, err = capsys.readouterr()
    assert out == "", "stdout stays the table alone"
    assert "`rl-assets report --experiment demo --home '/tmp/my home'`" in err
    assert "`rl-assets show s0-p0-n0 --experiment demo --home '/tmp/my home'`" in err, "a trial that exists"
    assert "`rl-assets dev --home '/tmp/my home'` (the UI" in err
