"""``task.toml``: a typed model of Harbor's whole task configuration schema (schema 1.x, up to 1.4).

Every key Harbor accepts is here, with Harbor's types and defaults, so a real Harbor task loads;
every model forbids extra keys, so a misspelt key is an error naming it instead of a setting that
silently does nothing. Types are checked as Harbor checks them (pydantic's lax mode: ``10`` is a
valid ``timeout_sec``, ``"ten"`` is not). Written from Harbor's ``src/harbor/models/task/config.py``
and its task documentation; the behaviour (what runs where) lives elsewhere, this is only the shape.

A task is untrusted input, so every number in it is finite and bounded (:func:`_bounded`): ``nan`` would
make ``min(timeout, cap)`` nan (no deadline at all), an infinity or ``1e9`` a limit that never comes, and
a negative size a pod the cluster refuses. The bounds are generous (a day, a terabyte of memory) so every
real Harbor task loads; a value out of them is refused naming its key and the value.
"""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

NetworkMode = Literal["public", "no-network", "allowlist"]
"""Harbor's network policies: open, none, or only the ``allowed_hosts``."""

_ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_TOPOLOGY = re.compile(r"^[1-9]\d*(x[1-9]\d*)+$")
_SERVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([GMK])\s*$", re.IGNORECASE)

MAX_SECONDS = 86_400
"""The longest any duration of a task may be: a day."""


def _finite(value: float | str) -> bool:
    """Whether ``value`` is a finite float, or a string that is not one of nan's or infinity's spellings."""
    try:
        return math.isfinite(float(value))
    except ValueError:  # not a number at all: pydantic says so in its own words
        return True


def _bounded(kind: type, rule: str, low: float, high: float, low_open: bool = False) -> Any:
    """``kind`` (int or float) within ``[low, high]`` (``(low, high]`` if ``low_open``), or ``must be {rule}``.

    A boolean is no number here (pydantic's lax mode would read ``true`` as 1), and nan fails every
    comparison, so it is refused with the rest, before pydantic's own message about it.
    """
    message = f"must be {rule}"

    def not_a_bool_or_nan(value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float | str) and not _finite(value)):
            raise ValueError(message)
        return value

    def within(value: int | float) -> int | float:
        if not (low < value if low_open else low <= value) or not value <= high:
            raise ValueError(message)
        return value

    return Annotated[kind, BeforeValidator(not_a_bool_or_nan), AfterValidator(within)]


Seconds = _bounded(float, f"a finite number of seconds greater than 0 and at most {MAX_SECONDS}", 0, MAX_SECONDS, True)
"""A timeout or an interval."""
Delay = _bounded(float, f"a finite number of seconds from 0 to {MAX_SECONDS}", 0, MAX_SECONDS)
"""A wait that may be none."""
MAX_CPUS = 1024
MAX_MEMORY_MB = 1_048_576
"""1 TiB."""
MAX_STORAGE_MB = 10_485_760
"""10 TiB."""
Cpus = _bounded(int, f"a whole number of CPUs from 1 to {MAX_CPUS}", 1, MAX_CPUS)
MemoryMB = _bounded(int, f"a whole number of MB from 1 to {MAX_MEMORY_MB}", 1, MAX_MEMORY_MB)
StorageMB = _bounded(int, f"a whole number of MB from 1 to {MAX_STORAGE_MB}", 1, MAX_STORAGE_MB)
Gpus = _bounded(int, "a whole number of GPUs from 0 to 64", 0, 64)
Retries = _bounded(int, "a whole number from 0 to 1000", 0, 1000)
Concurrency = _bounded(int, "a whole number from 1 to 1024", 1, 1024)
Count = _bounded(int, "a whole number from 0 to 1000000", 0, 1_000_000)
UserId = _bounded(int, "a user id from 0 to 4294967294", 0, 4_294_967_294)
FiniteFloat = _bounded(float, "a finite number", -math.inf, math.inf)


STEP_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class Section(BaseModel):
    """A table of ``task.toml``: unknown keys are refused, values are checked against their types."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _PhaseNetwork(Section):
    """An optional network override for one phase (the agent's run, the verifier's run)."""

    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None

    @model_validator(mode="after")
    def _hosts_need_allowlist(self) -> _PhaseNetwork:
        if self.allowed_hosts is not None and self.network_mode != "allowlist":
            raise ValueError("allowed_hosts is only valid when network_mode = 'allowlist'")
        for host in self.allowed_hosts or []:
            if not host.strip() or "://" in host or any(c.isspace() for c in host.strip()):
                raise ValueError("allowed_hosts entries must be hostnames, IP addresses or CIDR ranges, not URLs")
        return self


class Author(Section):
    name: str
    email: str | None = None


class PackageInfo(Section):
    """``[task]``: the task's identity in Harbor's registry (``org/name``)."""

    name: str
    version: str | None = Field(default=None, min_length=1)
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _org_slash_name(cls, value: str) -> str:
        if not _ORG_NAME.match(value) or ".." in value:
            raise ValueError("must be 'org/name' of letters, digits, '.', '_' or '-', not starting with '.'")
        return value


class HealthcheckConfig(Section):
    """Docker-HEALTHCHECK-like readiness probe run after the environment starts."""

    command: str
    interval_sec: Seconds = 5.0
    timeout_sec: Seconds = 30.0
    start_period_sec: Delay = 0.0
    start_interval_sec: Seconds = 5.0
    retries: Retries = 3


class TpuSpec(Section):
    """``[environment.tpu]``: one TPU slice, by accelerator type and topology (e.g. ``2x4``)."""

    type: str = Field(min_length=1)
    topology: str

    @field_validator("topology")
    @classmethod
    def _dimensions(cls, value: str) -> str:
        if not _TOPOLOGY.match(value.strip()):
            raise ValueError("must be positive integers joined by 'x', e.g. '2x4'")
        return value.strip()


class MCPServerConfig(Section):
    """``[[environment.mcp_servers]]``: an MCP server offered to the agent."""

    name: str
    transport: Literal["stdio", "sse", "streamable-http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)

    @field_validator("transport", mode="before")
    @classmethod
    def _http_alias(cls, value: Any) -> Any:
        return "streamable-http" if value == "http" else value

    @model_validator(mode="after")
    def _transport_fields(self) -> MCPServerConfig:
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"'url' is required for transport '{self.transport}'")
        if self.transport == "stdio" and not self.command:
            raise ValueError("'command' is required for transport 'stdio'")
        return self


class EnvironmentConfig(Section):
    """``[environment]`` (and ``[verifier.environment]``): where the agent runs and what it may use."""

    build_timeout_sec: Seconds = 600.0
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: Cpus | None = None
    memory_mb: MemoryMB | None = None
    storage_mb: StorageMB | None = None
    gpus: Gpus | None = None
    gpu_types: list[str] | None = None
    tpu: TpuSpec | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None
    mcp_servers: list[MCPServerConfig] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: HealthcheckConfig | None = None
    workdir: str | None = None
    allow_internet: bool | None = Field(default=None, description="deprecated by Harbor: network_mode")
    memory: str | None = Field(default=None, description="deprecated by Harbor: memory_mb ('2G', '512M')")
    storage: str | None = Field(default=None, description="deprecated by Harbor: storage_mb")

    @field_validator("os", mode="before")
    @classmethod
    def _os_any_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _legacy_and_network(self) -> EnvironmentConfig:
        for old, new, high in (("memory", "memory_mb", MAX_MEMORY_MB), ("storage", "storage_mb", MAX_STORAGE_MB)):
            size = getattr(self, old)
            if size is None:
                continue
            match = _SIZE.match(size)
            if not match:
                raise ValueError(f"{old}: expected a size like '2G' or '512M'")
            number, unit = float(match[1]), match[2].upper()
            rule = f"{new} must be a whole number of MB from 1 to {high}"
            if not number <= high * 1024:  # also inf (hundreds of digits), which int() cannot convert
                raise ValueError(f"{old}: more than {high} MB; {rule}")
            mb = int(number * 1024) if unit == "G" else int(number) if unit == "M" else int(number / 1024)
            if not 1 <= mb <= high:  # set below without validation: bounded here as the key itself is
                raise ValueError(f"{old}: {size.strip()} is {mb} MB; {rule}")
            current = getattr(self, new)
            if current is not None and current != mb:
                raise ValueError(f"{old} ({mb} MB) conflicts with {new} ({current})")
            setattr(self, new, mb)
        if self.network_mode is None and self.allow_internet is not None:
            self.network_mode = "public" if self.allow_internet else "no-network"
        if self.allowed_hosts is not None and self.network_mode != "allowlist":
            raise ValueError("allowed_hosts is only valid when network_mode = 'allowlist'")
        return self

    @property
    def effective_network_mode(self) -> NetworkMode:
        """Harbor's baseline when the task says nothing: public."""
        return self.network_mode or "public"


class ContinuousVerificationConfig(Section):
    """``[verifier.continuous]``: verify submissions while the agent is still working."""

    enabled: bool = False
    watch_dir: str = "/app/submissions/queue"
    results_dir: str = "/app/submissions/results"
    return_results_to_agent: bool = True
    poll_interval_sec: Seconds = 5.0
    max_concurrent: Concurrency = 1
    max_submissions: Count | None = None
    drain_pending_on_stop: bool = False
    shared_scheduler_lock_path: str | None = None
    shared_result_cache_dir: str | None = None
    reuse_matching_result_for_final: bool = False
    submission_path: str = "/app/submission/policy.pt"
    timeout_sec: Seconds | None = None
    artifact_name: str = "continuous"


class VerifierCollectConfig(Section):
    """``[[verifier.collect]]``: a command snapshotting a compose service's state before teardown."""

    command: str
    service: str = "main"
    timeout_sec: Seconds = 60.0
    user: str | UserId | None = None

    @field_validator("service")
    @classmethod
    def _service_name(cls, value: str) -> str:
        if not _SERVICE_NAME.match(value.strip()):
            raise ValueError("must be a Docker Compose service name")
        return value.strip()


class VerifierConfig(_PhaseNetwork):
    """``[verifier]``: how ``tests/test.sh`` runs once the agent is done."""

    timeout_sec: Seconds = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | UserId | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: EnvironmentConfig | None = None
    continuous: ContinuousVerificationConfig = Field(default_factory=ContinuousVerificationConfig)
    collect: list[VerifierCollectConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mode_matches_environment(self) -> VerifierConfig:
        if self.environment_mode == "shared" and self.environment is not None:
            raise ValueError("environment_mode = 'shared' conflicts with a [verifier.environment] table")
        return self

    @property
    def separate(self) -> bool:
        """Harbor's rule: a ``[verifier.environment]`` without a mode means a separate verifier container."""
        return self.environment_mode == "separate" or self.environment is not None


class AgentConfig(_PhaseNetwork):
    """``[agent]``: limits of the agent's run (no ``timeout_sec``: no timeout)."""

    timeout_sec: Seconds | None = None
    user: str | UserId | None = None


class SolutionConfig(Section):
    """``[solution]``: the environment ``solution/solve.sh`` (the oracle) runs with."""

    env: dict[str, str] = Field(default_factory=dict)


class ArtifactConfig(Section):
    """An entry of ``artifacts``: a path collected from the environment after the run."""

    source: str
    destination: str | None = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None

    @field_validator("source", "destination")
    @classmethod
    def _no_parent_parts(cls, value: str | None) -> str | None:
        if value is not None and ".." in PurePosixPath(value).parts:
            raise ValueError("must not contain '..'")
        return value


class StepConfig(Section):
    """``[[steps]]``: one step of a multi-step task, overriding the task's agent and verifier."""

    name: str = Field(pattern=STEP_NAME_PATTERN, max_length=64)
    """Its directory under ``steps/``: a portable name, never a path."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    min_reward: FiniteFloat | dict[str, FiniteFloat] | None = None
    healthcheck: HealthcheckConfig | None = None
    artifacts: list[str | ArtifactConfig] = Field(default_factory=list)


class TaskConfig(Section):
    """The whole of ``task.toml``. Harbor's older files call ``schema_version`` ``version``: accepted too."""

    schema_version: str = "1.4"
    task: PackageInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    source: str | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: list[StepConfig] | None = Field(None, min_length=1)
    artifacts: list[str | ArtifactConfig] = Field(default_factory=list)

    @field_validator("steps")
    @classmethod
    def _unique_step_names(cls, steps: list[StepConfig] | None) -> list[StepConfig] | None:
        names = [step.name.casefold() for step in steps or []]
        if len(set(names)) != len(names):
            raise ValueError("step names must be unique (ignoring case)")
        return steps

    @model_validator(mode="before")
    @classmethod
    def _old_version_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            data.setdefault("schema_version", data.pop("version"))
        return data
