"""Units whose runs keep failing: both drivers (the CLI's loop and the sensor) give them up by the planner's rule."""

from __future__ import annotations

import uuid

from rl_assets.assets.partitions import trial_partition_key
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import Runtime
from rl_assets.driver.planner import MAX_FAILED_RUNS, Launch, Plan, StepStatus, TrialStatus, give_up_on_crashing


def _experiment(stores) -> ExperimentConfig:
    config = ExperimentConfig(name=f"giveup-{uuid.uuid4().hex[:8]}", steps=1, worlds=1, prompts=2, samples=1)
    stores.experiments.create_or_resume(config, Runtime())
    return config


def test_a_trial_whose_last_runs_all_failed_fails_for_good_and_is_not_launched_again(stores):
    config = _experiment(stores)
    crashing, flaky = (str(trial_partition_key(config, 0, slot)) for slot in ("p0-n0", "p1-n0"))
    trials = [
        TrialStatus("s0-p0-n0", crashing, "pending", runs=MAX_FAILED_RUNS + 1, failures=MAX_FAILED_RUNS),
        TrialStatus("s0-p1-n0", flaky, "pending", runs=MAX_FAILED_RUNS + 1, failures=MAX_FAILED_RUNS - 1),
    ]
    launches = [Launch("trial_job", t.partition_key, {}, t.runs, t.failures) for t in trials]
    step = StepStatus(0, config.step_key(0), trials, trained=False, train_running=False)

    triage = give_up_on_crashing(stores, Plan(config, [], [step], launches))

    assert [launch.partition_key for launch in triage.launches] == [flaky], "a success since resets the count"
    assert [t.trial_id for t in triage.failed_trials] == ["s0-p0-n0"] and not triage.stuck
    assert set(stores.attempts.failed_trials(config.name)) == {"s0-p0-n0"}, "its step trains without it"


def test_a_world_whose_runs_keep_failing_is_stuck_for_a_person_not_launched_again(stores):
    config = _experiment(stores)
    world = Launch("world_job", "w0", {}, MAX_FAILED_RUNS, MAX_FAILED_RUNS)

    triage = give_up_on_crashing(stores, Plan(config, ["w0"], [], [world]))

    assert triage.stuck == [world] and not triage.launches and not triage.failed_trials
    assert not stores.attempts.failed_trials(config.name)
