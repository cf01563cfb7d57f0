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

import os
from typing import Any, Literal

import dagster as dg
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rl_assets.domain.names import check_experiment_name, shown

ENV_VAR = "RL_ASSETS_ENV"
NAMESPACE_ENV = "RL_ASSETS_K8S_NAMESPACE"
IMAGE_ENV = "RL_ASSETS_IMAGE"
JUDGE_RATE_ENV = "RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE"
RESCORE_EXPERIMENTS_ENV = "RL_ASSETS_RESCORE_EXPERIMENTS"
MAX_JUDGE_CALLS_PER_MINUTE = 100_000
K8S_NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"

Environment = Literal["local", "kubernetes"]


class BadEnvironmentError(ValueError):
    """An environment variable rl-assets reads holds a value it cannot use; the message names the variable."""


class Settings(BaseModel):
    """The environment variables rl-assets reads, validated by one schema (each field's alias is its variable).

    Read once per process by :func:`settings`; the CLI reads it before any
    work, so a bad value is one line naming the variable, not a traceback in
    a driver or a code server later.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    env: Environment = Field("local", alias=ENV_VAR, description="'local' or 'kubernetes'.")
    judge_max_calls_per_minute: int | None = Field(
        None,
        alias=JUDGE_RATE_ENV,
        ge=1,
        le=MAX_JUDGE_CALLS_PER_MINUTE,
        strict=True,
        description=f"The judge API's quota, calls per minute (1 to {MAX_JUDGE_CALLS_PER_MINUTE}); unset: no limit.",
    )
    rescore_experiments: tuple[str, ...] = Field(
        (),
        alias=RESCORE_EXPERIMENTS_ENV,
        description="Experiments the rubric sensor re-scores: comma-separated names, or '*' for all.",
    )
    k8s_namespace: str = Field(
        "rl-assets", alias=NAMESPACE_ENV, pattern=K8S_NAME_PATTERN, description="Kubernetes namespace of the pods."
    )

    @field_validator("judge_max_calls_per_minute", mode="before")
    @classmethod
    def _whole_number(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip()
            if not value:
                return None
            if not value.isdigit():
                raise ValueError("must be a whole number of calls")
            return int(value)
        return value

    @field_validator("rescore_experiments", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        names = tuple(n.strip() for n in value.split(",") if n.strip())
        if names == ("*",):
            return names
        for name in names:
            try:
                check_experiment_name(name)
            except ValueError as err:
                raise ValueError(f"{shown(name)}: an experiment name {err}, or '*' alone") from None
        return names


_PROBLEMS = {
    "literal_error": "must be one of {expected}",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
    "string_pattern_mismatch": "must be a Kubernetes name (lowercase letters, digits and '-', at most 63)",
}


def settings(environ: dict[str, str] | os._Environ[str] = os.environ) -> Settings:
    """The validated settings, or :class:`BadEnvironmentError` naming the first bad variable and its value."""
    read = {f.alias: environ[f.alias] for f in Settings.model_fields.values() if f.alias in environ}
    try:
        return Settings.model_validate(read)
    except ValidationError as err:
        first = err.errors()[0]
        variable = str(first["loc"][0])
        template = _PROBLEMS.get(first["type"])
        problem = template.format(**first.get("ctx", {})) if template else first["msg"].removeprefix("Value error, ")
        raise BadEnvironmentError(f"${variable}: {problem} (got {shown(read.get(variable))})") from None


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
    common = {
        "stores": StoresResource(home=dg.EnvVar("RL_ASSETS_HOME")),
        "trainer": TrainerResource(
            ray_address=dg.EnvVar("RL_ASSETS_RAY_ADDRESS"), namespace=dg.EnvVar("RL_ASSETS_RAY_NAMESPACE")
        ),
    }
    if current() == "local":
        from rl_assets.resources.world_store import WorldStoreResource

        return {
            **common,
            "world_store": WorldStoreResource(home=dg.EnvVar("RL_ASSETS_HOME")),
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
    """Extra tags of a run the driver sensor requests, made ready for it first.

    On Kubernetes a world's build run mounts the world's PVC in its run worker
    pod, so the claim is created here, before the run exists.
    """
    if current() == "local" or job != "world_job":
        return {}
    from rl_assets.kubernetes import world_build_tags

    world_store.claim_world(partition_key)
    return world_build_tags(partition_key)
