"""A planning tick reads the open work, not the history: counted in records fetched, not timed.

A long experiment's history (50 trained steps of 100 trials, about 5,000 runs) is written in bulk into the
test home's Dagster instance; the driver's tick (the plan, its run requests, its partition requests and the
change it waits on) runs against an instance that counts every run record, materialization and partition
key it hands back. Reading the whole history would fetch 5,000 runs and as many materializations.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from rl_assets.assets.rollout_batches import batch_members
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import ExecutionSettings, Runtime
from rl_assets.driver.planner import RESCORING_WINDOW, last_change, plan
from rl_assets.driver.sensor import ROLLOUT_JOBS, partition_requests_of, run_requests_of
from rl_assets_testkit.expectations import run_cli
from rl_assets_testkit.history import History, write_history

TRIALS_PER_STEP = 100
TRAINED_STEPS = 50
IN_FLIGHT = 10
CAP = 32


class CountingInstance:
    """A Dagster instance that counts what its reads hand back (run records, partitions, materializations)."""

    COUNTED = ("get_run_records", "get_runs", "get_materialized_partitions", "get_latest_storage_id_by_partition")

    def __init__(self, instance: Any) -> None:
        self._instance = instance
        self.fetched: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._instance, name)
        if name not in self.COUNTED:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            self.fetched[name] = self.fetched.get(name, 0) + len(result)
            return result

        return counted

    @property
    def total(self) -> int:
        return sum(self.fetched.values())


@pytest.fixture(scope="module")
def long_experiment(instance, stores) -> tuple[ExperimentConfig, History]:
    config = ExperimentConfig(name=f"long-{uuid.uuid4().hex[:8]}", steps=80, worlds=2, prompts=20, samples=5)
    stores.experiments.create_or_resume(config, Runtime(execution=ExecutionSettings(max_concurrent_trials=CAP)))
    return config, write_history(instance, stores, config, TRAINED_STEPS, in_flight=IN_FLIGHT)


@pytest.fixture(scope="module")
def instance():
    from dagster import DagsterInstance

    with DagsterInstance.get() as inst:
        yield inst


def test_the_history_is_long_and_the_plan_sees_where_it_stands(long_experiment, instance, stores):
    config, history = long_experiment
    assert history.runs > TRAINED_STEPS * TRIALS_PER_STEP
    p = plan(instance, stores, config)
    assert p.steps_trained == TRAINED_STEPS and not p.done
    assert [s.step for s in p.steps] == [TRAINED_STEPS - 1, TRAINED_STEPS], "the last trained step and the open one"
    open_step = p.steps[-1]
    assert (open_step.count("running"), open_step.count("pending")) == (IN_FLIGHT, TRIALS_PER_STEP - IN_FLIGHT)
    assert {launch.job for launch in p.launches} == {"trial_job"} and len(p.launches) == TRIALS_PER_STEP - IN_FLIGHT


def test_status_reads_the_summaries_of_a_long_experiment(long_experiment, home):
    config, _ = long_experiment
    status = json.loads(run_cli(home, "status", "--experiment", config.name, "--json").stdout)
    assert status["status"] == "in progress" and len(status["steps"]) == TRAINED_STEPS
    assert status["progress"].endswith(f"{IN_FLIGHT} running, {TRIALS_PER_STEP - IN_FLIGHT} pending of 100 trials")


def test_a_driver_tick_fetches_the_open_steps_records_not_the_history(long_experiment, instance, stores):
    config, history = long_experiment
    counting = CountingInstance(instance)

    last_change(counting, stores)
    plans = [plan(counting, stores, config)]
    requests = run_requests_of(stores, plans, None, lambda _: None, ROLLOUT_JOBS)
    partition_requests_of(counting, plans)

    (rollout,) = requests  # the open step's pending trials, in one rollout run
    assert len(batch_members(rollout.run_config)) == CAP - IN_FLIGHT, "up to the cap in flight"
    # The last trained step's runs and materializations, the open step's, and whatever is in flight in the home:
    # a bound set by a step's size, while the history holds 50 steps of them.
    bound = 3 * (TRIALS_PER_STEP + 1) + 2 * IN_FLIGHT
    assert counting.total <= bound < history.runs / 10, counting.fetched


def test_a_rescoring_tick_looks_at_a_window_of_steps_not_the_rest(long_experiment, instance, stores, monkeypatch):
    config, history = long_experiment
    counting = CountingInstance(instance)
    looked: list[int] = []
    has_reward = stores.trials.has_reward

    def counted_has_reward(experiment: str, rubric: str, step: int, slot: str) -> bool:
        looked.append(step)
        return has_reward(experiment, rubric, step, slot)

    monkeypatch.setattr(stores.trials, "has_reward", counted_has_reward)
    p = plan(counting, stores, config, rubric="v2-efficiency")

    assert [s.step for s in p.steps] == list(range(RESCORING_WINDOW)) and not p.done
    assert {launch.job for launch in p.launches} == {"judge_job"}
    assert len(p.launches) == RESCORING_WINDOW * TRIALS_PER_STEP, "the window's judgments, launched together"
    assert set(looked) == set(range(RESCORING_WINDOW)) and len(looked) == RESCORING_WINDOW * TRIALS_PER_STEP
    assert counting.total == 0, counting.fetched  # no run of the re-scoring yet; the first chain's are not read
    assert RESCORING_WINDOW * TRIALS_PER_STEP < history.runs / 5
