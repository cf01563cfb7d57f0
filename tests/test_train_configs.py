"""Configurations beyond the reference one, end to end, against the spec oracle (``rl_assets_testkit.oracle``).

Between them they change every number of the config (steps, worlds, prompts, samples, lr, max_turns) and
the rubric; trials that fail for good are in ``test_failed_trial_policy.py``.
"""

from __future__ import annotations

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets_testkit.expectations import cli_args, oracle_expectation, table_of, train_json

CONFIGS = {
    "long": dict(steps=4, worlds=2, prompts=2, samples=2, lr=1.5),
    "wide": dict(steps=2, worlds=4, prompts=5, samples=1, lr=0.5, max_turns=3, rubric="v2-efficiency"),
    "deep": dict(steps=3, worlds=1, prompts=1, samples=3, lr=3.0, max_turns=2, rubric="v2-efficiency"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_configuration_matches_the_specification(home, name):
    fields = CONFIGS[name]
    result = train_json(home, *cli_args(name, fields))
    table, priors = oracle_expectation(ExperimentConfig(name=name, **fields))
    assert table_of(result) == table
    assert result["weights"] == priors
    trials = fields["steps"] * fields["prompts"] * fields["samples"]
    assert result["counts"]["generate_attempts"] == trials
    assert result["counts"]["judge_calls"] == trials
    assert result["counts"]["train_applications"] == fields["steps"]
