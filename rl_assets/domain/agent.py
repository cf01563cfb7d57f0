"""The reference agent: reads documents in an order drawn from its prior.

Its decisions are :mod:`rl_assets.domain.reference_policy` (plain Python, what the sandbox runs); this
wraps them in the typed records for the in-memory oracle. It only touches its world through
:class:`Tools`, the seam where a real sandbox (shell, editor, browser) plugs in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from rl_assets.domain.models import TrialSpec, Turn, VerifierOutcome
from rl_assets.domain.reference_policy import act
from rl_assets.domain.transcripts import Transcript


class Tools(Protocol):
    """What the agent may do in its sandbox."""

    def read(self, path: str) -> str: ...

    def write(self, path: str, text: str) -> None: ...


class Rollout(BaseModel):
    """What the agent produced; the harness adds world and policy identity."""

    model_config = ConfigDict(frozen=True)

    turns: list[Turn]
    answer: str
    files_written: list[str]
    transcript: Transcript | None = None
    """A chat agent's conversation and model calls."""
    verifier: VerifierOutcome | None = None
    """A task trial's verifier outcome, read after the agent finished."""


def run_agent(
    spec: TrialSpec,
    prior: list[float],
    tools: Tools,
    on_fault_draw: Callable[[float], None] = lambda _draw: None,
) -> Rollout:
    """Run one trial in memory (the oracle). ``on_fault_draw`` may raise to inject a sandbox fault."""
    turns, answer, files = act(spec.trial_id, spec.max_turns, prior, tools.read, tools.write, on_fault_draw)
    return Rollout(turns=[Turn(doc=d, found=f) for d, f in turns], answer=answer, files_written=files)
