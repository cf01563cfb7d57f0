"""Two ``train`` commands on one experiment at once: exactly one trains, the other exits with a clear message.

A following command holds a Postgres advisory lock per experiment while it follows; a second one finds it
taken and exits with an error naming the experiment. The home's services start once (a file lock), so there
is one daemon, one driver. Nothing is executed twice: one rollout and one judge call per trial, one training
application per step, one driver attempt.
"""

from __future__ import annotations

import json

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets_testkit.expectations import oracle_expectation, table_of
from rl_assets_testkit.kills import Evidence, Train, Watch, run_train, train_args

EXIT_USAGE = 2  # the refusal (see rl_assets.cli.commands._follow)


def test_two_trains_of_one_experiment_at_once_execute_each_unit_once(home, stores, instance):
    config = ExperimentConfig(name="concurrent", steps=1, worlds=1, prompts=1, samples=2)
    args = train_args(config, {"tool_latency": 0.2})
    trains = [Train.start(home, args), Train.start(home, args)]  # started together, before either is up
    try:
        outcomes = [t.finish() for t in trains]
    finally:
        for t in trains:
            t.close()

    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0, EXIT_USAGE], "\n\n".join(f"exit {code}:\n{err[-6000:]}" for code, _, err in outcomes)
    (_, out, _), (_, _, busy_err) = sorted(outcomes, key=lambda o: o[0])
    assert busy_err.strip().splitlines()[-1] == (
        f"rl-assets: error: another driver is already running experiment {config.name!r}"
    )

    result = json.loads(out)
    table, weights = oracle_expectation(config)
    assert table_of(result) == table and result["weights"] == weights
    evidence = Evidence.of(Watch(stores.db, instance, config))
    assert evidence.problems() == []
    assert result["counts"] == {
        "generate_attempts": 2,
        "generate_failures": 0,
        "judge_calls": 2,
        "judge_attempts": 2,
        "train_applications": 1,
        "driver_attempts": 1,
    }, "the second driver never started: it did not even record an attempt"

    # The refused command, run again once the first is done, prints the same result and does nothing.
    code, again, err = run_train(home, args)
    assert code == 0, err[-2000:]
    assert json.loads(again) == result
