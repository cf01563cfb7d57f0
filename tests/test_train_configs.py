"""Configurations beyond the reference one, checked against the in-memory oracle of the spec."""

from __future__ import annotations

import pytest
from conftest import cli_args, oracle_expectation, table_of, train_json

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import FaultConfig

CONFIGS = {
    "long": dict(steps=4, worlds=2, prompts=2, samples=2, lr=1.5),
    "wide": dict(steps=2, worlds=4, prompts=5, samples=1, lr=0.5, max_turns=3, rubric="v2-efficiency"),
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


def test_a_trial_that_fails_for_good_is_skipped_not_fatal(home, stores):
    """With no retries, every trial whose first attempt faults fails for good; its step trains without it."""
    fields = dict(steps=3, worlds=3, prompts=3, samples=2, generate_retries=0)
    result = train_json(home, *cli_args("doomed", fields), "--flaky-trial-rate", "0.25")
    config = ExperimentConfig(name="doomed", **fields)
    faults = FaultConfig(flaky_trial_rate=0.25)
    failed = frozenset(t.trial_id for s in range(3) for t in config.trials(s) if faults.trial_flakes(t.trial_id))
    assert sorted(failed) == ["s0-p2-n1", "s1-p0-n0", "s1-p2-n0", "s1-p2-n1", "s2-p1-n1", "s2-p2-n0"]
    table, priors = oracle_expectation(config, failed)
    assert table_of(result) == table
    assert result["weights"] == priors
    assert [s["trials_ok"] for s in result["steps"]] == [5, 3, 4]
    assert result["counts"]["generate_failures"] == 6 and result["counts"]["generate_attempts"] == 18
    recorded = stores.attempts.failed_trials("doomed")
    assert sorted(recorded) == sorted(failed)
    assert all(reason.startswith("generate: injected sandbox fault") for reason in recorded.values())
