"""Re-scoring and forks on the reference experiment: judge calls only, results side by side."""

from __future__ import annotations

import json

import pytest

from rl_assets_testkit.expectations import run_cli, table_of, train_json

CLEAN = [(1.601, 4.67, 6), (2.323, 2.17, 6), (2.352, 1.67, 6)]
RESCORED = [(2.391, 4.67, 6), (3.258, 2.17, 6), (3.343, 1.67, 6)]
FORKED = [(2.391, 4.67, 6), (3.299, 1.83, 6), (3.343, 1.67, 6)]


def _json(home, *args: str) -> dict:
    return json.loads(run_cli(home, *args, "--json").stdout)


@pytest.fixture(scope="module")
def reference(home) -> dict:
    result = train_json(home, "--experiment", "rescored")
    assert table_of(result) == CLEAN
    return result


def test_rescore_judges_again_without_generating_and_keeps_both_rubrics(home, reference):
    v2 = _json(home, "rescore", "--experiment", "rescored", "--rubric", "v2-efficiency")
    assert v2["rubric"] == "v2-efficiency" and table_of(v2) == RESCORED
    counts = v2["counts"]
    assert counts["generate_attempts"] == 18, "re-scoring never generates"
    assert counts["judge_calls"] == 36, "18 new judge calls, cumulative for the experiment"
    assert counts["train_applications"] == 6, "a second chain of 3 steps, beside the first"

    back = _json(home, "rescore", "--experiment", "rescored", "--rubric", "v1")
    assert table_of(back) == CLEAN and back["weights"] == reference["weights"]
    assert back["counts"]["judge_calls"] == 36, "going back to a used rubric costs no judge call"

    again = _json(home, "rescore", "--experiment", "rescored", "--rubric", "v2-efficiency")
    assert table_of(again) == RESCORED and again["weights"] == v2["weights"]
    assert again["counts"] == counts, "a finished re-scoring is not redone"


def test_fork_reuses_unchanged_rollouts_and_regenerates_the_rest(home, reference):
    fork = _json(home, "fork", "--from", "rescored", "--experiment", "forked", "--rubric", "v2-efficiency")
    assert table_of(fork) == FORKED
    counts = fork["counts"]
    assert counts["generate_attempts"] == 12, "the 6 step-0 rollouts are reused, steps 1-2 regenerated"
    assert counts["judge_calls"] == 18 and counts["train_applications"] == 3
    report = _json(home, "report", "--experiment", "forked")
    assert report["generate"]["attempts"] == 12


def test_rescore_refuses_unknown_rubric_and_untrained_experiment(home, reference):
    proc = run_cli(home, "rescore", "--experiment", "rescored", "--rubric", "v9", check=False)
    assert proc.returncode == 2 and "--rubric: unknown rubric 'v9'" in proc.stderr
    proc = run_cli(home, "rescore", "--experiment", "nosuch", "--rubric", "v1", check=False)
    assert proc.returncode == 2 and "no experiment named 'nosuch'" in proc.stderr
    for command in (["status"], ["report"], ["export", "--format", "skyrl"]):
        proc = run_cli(home, *command, "--experiment", "nosuch", check=False)
        assert proc.returncode == 2 and "error: --experiment: no experiment named 'nosuch'" in proc.stderr, command
