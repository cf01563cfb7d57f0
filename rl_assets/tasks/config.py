"""``task.toml``: a typed model of Harbor's whole task configuration schema (schema 1.x, up to 1.4).

Every key Harbor accepts is here, with Harbor's types and defaults, so a real Harbor task loads;
every model forbids extra keys, so a misspelt key is an error naming it instead of a setting that
silently does nothing. Types are checked as Harbor checks them (pydantic's lax mode: ``10`` is a
valid ``timeout_sec``, ``"ten"`` is not). Written from Harbor's ``src/harbor/models/task/config.py``
and its task documentation; the behaviour (what runs where) lives elsewhere, this is only the shape.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NetworkMode = Literal["public", "no-network", "allowlist"]
"""Harbor's network policies: open, none, or only the ``allowed_hosts``."""

_ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_TOPOLOGY = re.compile(r"^[1-9]\d*(x[1-9]\d*)+$")
_SERVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([GMK])\s*$", re.IGNORECASE)


class Section(BaseModel):
    """A table of ``task.toml``: unknown keys are refused, values are checked against their types."""

    model_config = ConfigDict(extra="forbid")


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
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


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

    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: int | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
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
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            size = getattr(self, old)
            if size is None:
                continue
            match = _SIZE.match(size)
            if not match:
                raise ValueError(f"{old}: expected a size like '2G' or '512M'")
            number, unit = float(match[1]), match[2].upper()
            mb = int(number * 1024) if unit == "G" else int(number) if unit == "M" else int(number / 1024)
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
    poll_interval_sec: float = Field(default=5.0, gt=0)
    max_concurrent: int = Field(default=1, ge=1)
    max_submissions: int | None = None
    drain_pending_on_stop: bool = False
    shared_scheduler_lock_path: str | None = None
    shared_result_cache_dir: str | None = None
    reuse_matching_result_for_final: bool = False
    submission_path: str = "/app/submission/policy.pt"
    timeout_sec: float | None = None
    artifact_name: str = "continuous"


class VerifierCollectConfig(Section):
    """``[[verifier.collect]]``: a command snapshotting a compose service's state before teardown."""

    command: str
    service: str = "main"
    timeout_sec: float = 60.0
    user: str | int | None = None

    @field_validator("service")
    @classmethod
    def _service_name(cls, value: str) -> str:
        if not _SERVICE_NAME.match(value.strip()):
            raise ValueError("must be a Docker Compose service name")
        return value.strip()


class VerifierConfig(_PhaseNetwork):
    """``[verifier]``: how ``tests/test.sh`` runs once the agent is done."""

    timeout_sec: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
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

    timeout_sec: float | None = None
    user: str | int | None = None


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

    name: str
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    min_reward: float | dict[str, float] | None = None
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
    steps: list[StepConfig] | None = None
    artifacts: list[str | ArtifactConfig] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _old_version_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            data.setdefault("schema_version", data.pop("version"))
        return data
