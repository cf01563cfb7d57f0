"""The Dagster code location: ``dg dev`` / ``dg check defs`` from the repository root (``[tool.dg]``).

The definitions are loaded lazily (``@dg.definitions``): importing this module
imports Dagster and builds nothing; the assets, jobs, sensors and resources
are defined (and the environment read) when a loader calls
``load_definitions``, once per process. ``defs`` (the built ``Definitions``)
and ``get_job`` remain for code that needs the objects themselves.

Resources read the home and the services from the environment that
``rl-assets`` (or the deployment) sets: ``RL_ASSETS_HOME``, ``DAGSTER_PG_*``,
``RL_ASSETS_RAY_ADDRESS`` and ``RL_ASSETS_RAY_NAMESPACE``.
"""

from __future__ import annotations

import functools

import dagster as dg


@dg.definitions
@functools.cache
def load_definitions() -> dg.Definitions:
    """The code location's assets, jobs, sensors and resources; built on the first call, then shared.

    The modules are imported here, not at the top: defining the assets and jobs reads and validates
    the environment (``RL_ASSETS_ENV`` picks the executor), which a mere import must not do.
    """
    from rl_assets.assets.rewards import rewards
    from rl_assets.assets.rubrics import rubrics
    from rl_assets.assets.task_images import task_images
    from rl_assets.assets.trajectories import trajectories
    from rl_assets.assets.weights import weights
    from rl_assets.assets.worlds import worlds
    from rl_assets.driver.deployment import resources
    from rl_assets.driver.jobs import judge_job, rollout_job, rollout_pods_job, train_job, trial_job, world_job
    from rl_assets.driver.launchpad import fork_experiment_job, rescore_experiment_job, start_experiment_job
    from rl_assets.driver.rubric_observer import rubric_observer
    from rl_assets.driver.sensor import driver_sensor, rubric_sensor, training_sensor

    return dg.Definitions(
        assets=[rubrics, worlds, task_images, trajectories, rewards, weights],
        jobs=[
            world_job,
            trial_job,
            judge_job,
            rollout_job,
            rollout_pods_job,
            train_job,
            start_experiment_job,
            fork_experiment_job,
            rescore_experiment_job,
        ],
        sensors=[driver_sensor, training_sensor, rubric_sensor, rubric_observer],
        resources=resources(),
    )


def __getattr__(name: str) -> dg.Definitions:
    """``defs``: the built definitions, for ``from rl_assets.definitions import defs``.

    A module attribute computed on access rather than a global, so that Dagster's
    loaders, which scan the module's globals, find only ``load_definitions``.
    """
    if name == "defs":
        return load_definitions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_job(name: str) -> dg.JobDefinition:
    return load_definitions().resolve_job_def(name)


def get_world_job() -> dg.JobDefinition:
    return get_job("world_job")


def get_trial_job() -> dg.JobDefinition:
    return get_job("trial_job")


def get_judge_job() -> dg.JobDefinition:
    return get_job("judge_job")


def get_rollout_job() -> dg.JobDefinition:
    return get_job("rollout_job")


def get_rollout_pods_job() -> dg.JobDefinition:
    return get_job("rollout_pods_job")


def get_train_job() -> dg.JobDefinition:
    return get_job("train_job")


RECONSTRUCTABLE_JOBS = {
    "world_job": get_world_job,
    "trial_job": get_trial_job,
    "judge_job": get_judge_job,
    "rollout_job": get_rollout_job,
    "rollout_pods_job": get_rollout_pods_job,
    "train_job": get_train_job,
}
