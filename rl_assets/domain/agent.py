"""The reference agent: reads documents in an order drawn from its prior.

It only touches its world through :class:`Tools`, the seam where a real
sandbox (shell, editor, browser) plugs in. Its random stream is seeded by the
trial id and the fault draw is always made first, so every attempt of a trial,
failed or not, produces the same trajectory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from rl_assets.domain.models import N_DOCS, TrialSpec, Turn
from rl_assets.domain.seeding import rng
from rl_assets.domain.world import DOCS_DIR

SECRET_MARKER = "secret:"
UNTIDY_PROBABILITY = 0.3


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


def reading_order(r, prior: list[float]) -> list[int]:
    """Documents without replacement, each pick weighted by the prior."""
    remaining = list(range(N_DOCS))
    order = []
    while remaining:
        pick = r.choices(remaining, weights=[prior[i] for i in remaining], k=1)[0]
        order.append(pick)
        remaining.remove(pick)
    return order


def run_agent(
    spec: TrialSpec,
    prior: list[float],
    tools: Tools,
    on_fault_draw: Callable[[float], None] = lambda _draw: None,
) -> Rollout:
    """Run one trial. ``on_fault_draw`` may raise to inject a sandbox fault."""
    r = rng("trial", spec.trial_id)
    on_fault_draw(r.random())
    turns: list[Turn] = []
    answer = ""
    for doc in reading_order(r, prior)[: spec.max_turns]:
        text = tools.read(f"{DOCS_DIR}/doc_{doc}.txt")
        found = SECRET_MARKER in text
        turns.append(Turn(doc=doc, found=found))
        if found:
            answer = text.split(SECRET_MARKER, 1)[1].strip()
            break
    tools.write("answer.txt", answer)
    files = ["answer.txt"]
    if r.random() < UNTIDY_PROBABILITY:
        tools.write("scratch.tmp", "notes\n")
        files.append("scratch.tmp")
    return Rollout(turns=turns, answer=answer, files_written=files)
