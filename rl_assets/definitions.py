"""The Dagster code location: ``dagster dev -m rl_assets.definitions``.

Resources read the home and the services from the environment that
``rl-assets`` (or the deployment) sets: ``RL_ASSETS_HOME``, ``DAGSTER_PG_*``,
``RL_ASSETS_RAY_ADDRESS`` and ``RL_ASSETS_RAY_NAMESPACE``.
"""

from __future__ import annotations

import dagster as dg

from rl_assets.assets import rewards, rubrics, trajectories, weights, worlds
from rl_assets.driver.launchpad import fork_experiment_job, rescore_experiment_job, start_experiment_job
from rl_assets.driver.sensor import driver_sensor, rubric_sensor
from rl_assets.environment import resources
from rl_assets.jobs import judge_job, train_job, trial_job, world_job
from rl_assets.rubric_observer import rubric_observer

defs = dg.Definitions(
    assets=[rubrics, worlds, trajectories, rewards, weights],
    jobs=[
        world_job,
        trial_job,
        judge_job,
        train_job,
        start_experiment_job,
        fork_experiment_job,
        rescore_experiment_job,
    ],
    sensors=[driver_sensor, rubric_sensor, rubric_observer],
    resources=resources(),
)


def get_job(name: str) -> dg.JobDefinition:
    return defs.resolve_job_def(name)


def get_world_job() -> dg.JobDefinition:
    return get_job("world_job")


def get_trial_job() -> dg.JobDefinition:
    return get_job("trial_job")


def get_judge_job() -> dg.JobDefinition:
    return get_job("judge_job")


def get_train_job() -> dg.JobDefinition:
    return get_job("train_job")


RECONSTRUCTABLE_JOBS = {
    "world_job": get_world_job,
    "trial_job": get_trial_job,
    "judge_job": get_judge_job,
    "train_job": get_train_job,
}
