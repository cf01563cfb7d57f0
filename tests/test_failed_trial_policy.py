"""``--failed-trial-policy``: a step trains without its trials that failed for good (``skip``), or without their
whole prompt group (``mask-group``), end to end, against the spec oracle.

Every injected fault hits a trial's first attempt only, so a trial fails for good exactly when its first
attempt faults and no retry is allowed (``--generate-retries 0`` / ``--judge-retries 0``); the oracle's own
fault draws say which trials those are.
"""

from __future__ import annotations

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets_testkit import oracle
from rl_assets_testkit.expectations import cli_args, oracle_expectation, table_of, train_json

SHAPE = dict(steps=3, worlds=3, prompts=3, samples=2)
SANDBOX_FAULTS = oracle.Faults(flaky_trial_rate=0.25, generate_retries=0)
JUDGE_FAULTS = oracle.Faults(judge_flake_rate=0.3, judge_retries=0)
CASES = {
    # name: (policy, faults, batch sizes per step)
    "doomed-skip": ("skip", SANDBOX_FAULTS, [5, 3, 4]),
    "doomed-mask": ("mask-group", SANDBOX_FAULTS, [4, 2, 2]),
    "judged-mask": ("mask-group", JUDGE_FAULTS, [2, 4, 0]),
}


def _fault_args(faults: oracle.Faults) -> list[str]:
    return ["--flaky-trial-rate", str(faults.flaky_trial_rate), "--judge-flake-rate", str(faults.judge_flake_rate)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_step_trains_without_what_failed_for_good_as_the_policy_says(home, stores, name):
    policy, faults, batch_sizes = CASES[name]
    fields = dict(
        SHAPE, generate_retries=faults.generate_retries, judge_retries=faults.judge_retries, failed_trial_policy=policy
    )
    config = ExperimentConfig(name=name, **fields)
    failed = oracle.failed_for_good(oracle.Config(**SHAPE), faults)
    assert len(failed) == 6

    result = train_json(home, *cli_args(name, fields), *_fault_args(faults))

    table, weights = oracle_expectation(config, failed)
    assert table_of(result) == table and result["weights"] == weights
    assert [s["trials_ok"] for s in result["steps"]] == batch_sizes
    assert [s["weights_version"] for s in result["steps"]] == [1, 2, 3], "a step with an empty batch still trains"
    recorded = stores.attempts.failed_trials(name)
    assert sorted(recorded) == sorted(failed)
    phase = "generate: injected sandbox fault" if faults.generate_retries == 0 else "judge: "
    assert all(reason.startswith(phase) for reason in recorded.values()), recorded
    counts = result["counts"]
    assert counts["train_applications"] == 3
    if faults.generate_retries == 0:
        assert (counts["generate_attempts"], counts["generate_failures"], counts["judge_calls"]) == (18, 6, 12)
    else:  # the judge answered before the failure: every trial was called once, and billed once
        assert (counts["generate_attempts"], counts["generate_failures"], counts["judge_calls"]) == (18, 0, 18)
