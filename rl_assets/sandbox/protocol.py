"""What the launcher sends the runner, and what comes back."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from rl_assets.domain.models import TrialSpec

ForkKind = Literal["overlay", "copy"]


class ForkLayout(BaseModel):
    """Directories of one fork. For ``copy``, ``merged`` already holds the copy."""

    model_config = ConfigDict(frozen=True)

    kind: ForkKind
    lower: str
    upper: str
    work: str
    merged: str


class SandboxRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    spec: TrialSpec
    prior: list[float]
    fork: ForkLayout
    tool_latency_s: float = 0.0
    fail_below: float = 0.0
    """Inject a sandbox fault when the trial's fault draw is below this."""
    hang: bool = False
    """Inject a hang: the runner never returns, and its timeout must kill it."""


class SandboxFault(RuntimeError):
    """An injected sandbox failure (as a dying container would cause)."""


RESULT_MARKER = "RL_ASSETS_ROLLOUT "
EXIT_FAULT = 3
