"""Injected faults: the tutorial's run (sandbox faults, judge faults after the call, a driver SIGKILL), and hangs."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import FaultConfig
from rl_assets_testkit.expectations import cli_args, oracle_expectation, run_cli, table_of, train_json


def test_injected_faults_change_nothing(home):
    result = train_json(
        home,
        "--experiment",
        "chaos",
        "--flaky-trial-rate",
        "0.25",
        "--judge-flake-rate",
        "0.3",
        "--crash-driver-at-step",
        "1",
    )
    table = [(s["trials_ok"], s["mean_reward"], s["mean_turns"]) for s in result["steps"]]
    assert table == [(6, 1.601, 4.67), (6, 2.323, 2.17), (6, 2.352, 1.67)]
    assert result["weights"]["w2"] == [1.0, 28.984, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert result["counts"] == {
        "generate_attempts": 24,
        "generate_failures": 6,
        "judge_calls": 18,
        "judge_attempts": 24,
        "train_applications": 3,
        "driver_attempts": 2,
    }
    assert len({s["actor_pid"] for s in result["steps"]}) == 1, "the same actor across the driver crash"

    report = json.loads(run_cli(home, "report", "--experiment", "chaos", "--json").stdout)
    assert report["generate"]["retried"] == ["s0-p2-n1", "s1-p0-n0", "s1-p2-n0", "s1-p2-n1", "s2-p1-n1", "s2-p2-n0"]
    assert report["judging"]["retried"] == ["s0-p0-n0", "s0-p1-n0", "s1-p0-n0", "s2-p0-n1", "s2-p1-n1", "s2-p2-n0"]
    assert report["judge_calls"]["extra_calls"] == 0 and report["driver_attempts"] == 2


def _processes_using(path: Path) -> list[int]:
    """Pids whose cwd or mount namespace (an overlay fork) refers to ``path``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            mounts = (proc / "mountinfo").read_text()
        except OSError:
            continue  # exited, or not ours to inspect
        if cwd.startswith(str(path)) or str(path) in mounts:
            pids.append(int(proc.name))
    return pids


def test_hanging_trials_are_killed_by_their_timeout_and_retried(home):
    fields = dict(steps=2, worlds=2, prompts=2, samples=2)
    config = ExperimentConfig(name="hangs", **fields)
    faults = FaultConfig(hang_trial_rate=0.4)
    hanging = [t.trial_id for s in range(2) for t in config.trials(s) if faults.trial_hangs(t.trial_id)]
    assert hanging, "the draw must make some trial hang, or this test shows nothing"

    result = train_json(home, *cli_args("hangs", fields), "--hang-trial-rate", "0.4", "--trial-timeout", "3")

    table, weights = oracle_expectation(config)
    assert table_of(result) == table and result["weights"] == weights
    assert result["counts"]["generate_failures"] == len(hanging)
    assert result["counts"]["generate_attempts"] == 8 + len(hanging)
    report = json.loads(run_cli(home, "report", "--experiment", "hangs", "--json").stdout)
    assert report["generate"]["retried"] == sorted(hanging)
    forks = home / "forks" / "hangs"
    assert not forks.exists() or not any(forks.iterdir()), "no leftover fork"
    assert _processes_using(home / "forks") == [], "no orphan sandbox process"
