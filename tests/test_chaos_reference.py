"""The tutorial's failure-injected run: sandbox faults, judge faults after the call, a driver SIGKILL."""

from __future__ import annotations

import json

from conftest import run_cli, train_json


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
