"""A rubric registered in the home (``rubrics --add v3.json``) is usable by ``train`` and ``fork``.

Before the fix the audit looked rubrics up among the built-ins only, so
``train --rubric v3`` died after recording the experiment. The expected
tables are the specification's, computed by the oracle for v3's weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets_testkit.expectations import cli_args, oracle_expectation, run_cli, table_of, train_json

V3 = (0.7, 0.4, 0.9)
"""(correctness, efficiency, tidiness): unlike v1 (1.0, 0.3, 0.1) and v2-efficiency (1.0, 1.0, 0.5)."""
FIELDS = dict(steps=2, worlds=2, prompts=2, samples=2)


@pytest.fixture(scope="module")
def v3(home: Path, tmp_path_factory) -> str:
    source = tmp_path_factory.mktemp("rubric") / "v3.json"
    cw, ew, tw = V3
    source.write_text(
        json.dumps({"name": "v3", "correctness_weight": cw, "efficiency_weight": ew, "tidiness_weight": tw})
    )
    listing = run_cli(home, "rubrics", "--add", str(source))
    assert any(line.startswith("v3 ") for line in listing.stdout.splitlines()), listing.stdout
    return "v3"


def test_train_with_a_home_rubric_gives_the_specifications_table(home, v3, stores):
    result = train_json(home, *cli_args("cust", {**FIELDS, "rubric": v3}))
    table, priors = oracle_expectation(ExperimentConfig(name="cust", rubric=v3, **FIELDS), rubric_weights=V3)
    assert result["rubric"] == "v3"
    assert table_of(result) == table
    assert result["weights"] == priors
    assert result["counts"]["judge_calls"] == 2 * 2 * 2 and result["counts"]["train_applications"] == 2
    assert stores.experiments.get("cust").rubric == "v3"


def test_fork_to_a_home_rubric_reuses_step_0_and_gives_the_specifications_table(home, v3):
    parent = train_json(home, *cli_args("cust-parent", FIELDS))
    assert parent["rubric"] == "v1"
    fork = json.loads(
        run_cli(home, "fork", "--from", "cust-parent", "--experiment", "cust-fork", "--rubric", v3, "--json").stdout
    )
    table, priors = oracle_expectation(ExperimentConfig(name="cust-fork", rubric=v3, **FIELDS), rubric_weights=V3)
    assert fork["rubric"] == "v3"
    assert table_of(fork) == table
    assert fork["weights"] == priors
    per_step = FIELDS["prompts"] * FIELDS["samples"]
    assert fork["counts"]["generate_attempts"] == per_step, "step 0's rollouts are reused; step 1 is regenerated"
    assert fork["counts"]["judge_calls"] == 2 * per_step


@pytest.mark.parametrize(
    "rubric, message",
    [
        ("no-such-rubric", "--rubric: unknown rubric 'no-such-rubric'"),
        ("../x", "--rubric: must be 1 to 64 letters"),
    ],
)
def test_train_and_fork_with_an_unusable_rubric_record_nothing(home, stores, rubric, message):
    before = stores.experiments.names()
    for args in (
        ["train", *cli_args("half", {**FIELDS, "rubric": rubric})],
        ["fork", "--from", "cust-parent", "--experiment", "half-fork", "--rubric", rubric],
    ):
        proc = run_cli(home, *args, check=False)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], proc.stderr
    assert stores.experiments.names() == before, "no half-created experiment"


def test_a_damaged_home_rubric_file_is_refused_before_the_experiment_is_recorded(home, stores):
    path = home / "rubrics" / "broken.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text('{"name": "broken", "correctness_weight": Infinity, "efficiency_weight": 1, "tidiness_weight": 1}')
    try:
        proc = run_cli(home, "train", *cli_args("broken-exp", {**FIELDS, "rubric": "broken"}), check=False)
    finally:
        path.unlink()
    assert proc.returncode == 2
    assert proc.stderr.strip() == "rl-assets: error: --rubric: broken.json: not JSON (Infinity is not a JSON number)"
    assert "broken-exp" not in stores.experiments.names()
