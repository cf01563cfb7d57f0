"""What the launcher sends the runner, and what comes back."""

from __future__ import annotations

from typing import Literal, Protocol

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


class CommandResult(BaseModel):
    """One command run in a task's sandbox, as the trusted side observed it (output capped)."""

    model_config = ConfigDict(frozen=True)

    exit_code: int | None
    """The command's exit status; ``None`` when it was killed at its timeout."""
    output: str
    """stdout and stderr interleaved, capped (the head and the tail kept, the middle marked as cut)."""
    truncated: bool = False
    timed_out: bool = False
    seconds: float = 0.0


class Shell(Protocol):
    """Where a tool-using agent's commands run: a sandbox on the trial's private fork of its world.

    The agent's loop runs in the trusted worker; only these commands run in the
    sandbox. Each command starts in the world's working directory with a clean
    environment; what it writes to the working directory stays for the next
    command of the same attempt, and nothing it starts outlives it.
    """

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """Run ``command`` with ``bash -c`` in the working directory; killed after ``timeout_s``."""
        ...
