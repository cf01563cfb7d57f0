"""The one switch between running locally and on Kubernetes: ``RL_ASSETS_ENV``.

``local`` (the default) runs every unit in its own local process, on the
home's embedded Postgres and Ray head; ``kubernetes`` runs each trial's and
judgment's and training step's step in its own pod (``k8s_job_executor`` with
per-tier pod config), forks worlds as PVCs cloned from VolumeSnapshots, reads
the judge's key from a Secret through ``dg.EnvVar``, and reaches the trainer on
the KubeRay cluster named by ``RL_ASSETS_RAY_ADDRESS``. Storage is Postgres
either way (``dagster.yaml``, from ``DAGSTER_PG_*``).
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from rl_assets.home.settings import (
    ENV_VAR,
    HOME_ENV,
    IMAGE_ENV,
    JUDGE_RATE_ENV,
    NAMESPACE_ENV,
    RAY_ADDRESS_ENV,
    RAY_NAMESPACE_ENV,
    Environment,
    settings,
)

__all__ = [  # the variables' names live in rl_assets.home.settings; these two are re-exported for its callers
    "ENV_VAR",
    "JUDGE_RATE_ENV",
    "current",
    "judge_max_calls_per_minute",
    "launch_tags",
    "rescore_experiments",
    "resources",
    "unit_executor",
]


def current() -> Environment:
    return settings().env


def judge_max_calls_per_minute() -> int | None:
    """The judge API's quota from ``RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE`` (unset: no limit)."""
    return settings().judge_max_calls_per_minute


def rescore_experiments() -> tuple[str, ...]:
    """The experiment names in ``RL_ASSETS_RESCORE_EXPERIMENTS`` (``("*",)`` for all)."""
    return settings().rescore_experiments


def _k8s_settings():
    from rl_assets.kubernetes import K8sSettings

    return K8sSettings(namespace=settings().k8s_namespace)


def unit_executor() -> dg.ExecutorDefinition:
    """The executor of trial, judge and train runs: in the run's own process, or one pod per step."""
    if current() == "local":
        return dg.in_process_executor
    from rl_assets.kubernetes import k8s_executor

    return k8s_executor(_k8s_settings())


def resources() -> dict[str, Any]:
    from rl_assets.resources.judge import JudgeResource
    from rl_assets.resources.stores import StoresResource
    from rl_assets.resources.trainer import TrainerResource

    rate = judge_max_calls_per_minute()
    # Dagster resolves an EnvVar in the run's own process, and its UI shows which variable configures each
    # resource; the variables themselves, their defaults and their checks are rl_assets.home.settings'.
    common = {
        "stores": StoresResource(home=dg.EnvVar(HOME_ENV)),
        "trainer": TrainerResource(ray_address=dg.EnvVar(RAY_ADDRESS_ENV), namespace=dg.EnvVar(RAY_NAMESPACE_ENV)),
    }
    if current() == "local":
        from rl_assets.resources.world_store import WorldStoreResource

        return {
            **common,
            "world_store": WorldStoreResource(home=dg.EnvVar(HOME_ENV)),
            "judge": JudgeResource(max_calls_per_minute=rate),
        }
    from rl_assets.kubernetes.pod_specs import JUDGE_KEY_ENV
    from rl_assets.resources.k8s_world_store import K8sWorldStoreResource

    return {
        **common,
        "world_store": K8sWorldStoreResource(namespace=dg.EnvVar(NAMESPACE_ENV), image=dg.EnvVar(IMAGE_ENV)),
        "judge": JudgeResource(api_key=dg.EnvVar(JUDGE_KEY_ENV), max_calls_per_minute=rate),
    }


def launch_tags(job: str, partition_key: str, world_store: Any) -> dict[str, str]:
    """Extra tags of a run the driver sensor requests.

    On Kubernetes a world's build run gets an ephemeral volume in its run
    worker pod, of the world store's class and size; Kubernetes creates its
    PVC with the pod, so nothing is created here (the sensor runs in the code
    server, which has no Kubernetes rights).
    """
    if current() == "local" or job != "world_job":
        return {}
    from rl_assets.kubernetes import world_build_tags

    return world_build_tags(partition_key, world_store.storage_class, world_store.world_size)


def batch_tags(judge_only: bool) -> dict[str, str]:
    """Extra tags of a rollout run the driver sensor requests: on Kubernetes its worker pod's tier, with the
    token to drive rollout pods or the judge's key to judge, never both (:func:`~rl_assets.kubernetes.
    pod_specs.batch_run_tags`)."""
    if current() == "local":
        return {}
    from rl_assets.kubernetes import batch_run_tags

    return batch_run_tags(judge_only, _k8s_settings().judge_key)
