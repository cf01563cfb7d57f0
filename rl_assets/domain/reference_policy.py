"""The reference agent's decisions, in plain Python: the code a rollout runs inside its sandbox.

It imports nothing but the standard library and :mod:`rl_assets.domain.seeding`, so the sandbox can run it
with the interpreter, the standard library and these two files, and nothing of the grader (the world's
secret, the verifier, the judge) or of the site-packages. Its random stream is seeded by the trial id and
the fault draw is always made first, so every attempt of a trial, failed or not, makes the same draws in
the same order; :func:`rl_assets.domain.agent.run_agent` wraps it for the in-memory oracle.
"""

from __future__ import annotations

from collections.abc import Callable

from rl_assets.domain.seeding import rng

SECRET_MARKER = "secret:"
UNTIDY_PROBABILITY = 0.3
DOCS_DIR = "docs"


def reading_order(r, prior: list[float]) -> list[int]:
    """Documents without replacement, each pick weighted by the prior."""
    remaining = list(range(len(prior)))
    order = []
    while remaining:
        pick = r.choices(remaining, weights=[prior[i] for i in remaining], k=1)[0]
        order.append(pick)
        remaining.remove(pick)
    return order


def act(
    trial_id: str,
    max_turns: int,
    prior: list[float],
    read: Callable[[str], str],
    write: Callable[[str, str], None],
    on_fault_draw: Callable[[float], None] = lambda _draw: None,
) -> tuple[list[tuple[int, bool]], str, list[str]]:
    """Run one trial through ``read``/``write``; returns ``(turns as (doc, found), answer, files written)``."""
    r = rng("trial", trial_id)
    on_fault_draw(r.random())
    turns: list[tuple[int, bool]] = []
    answer = ""
    for doc in reading_order(r, prior)[:max_turns]:
        text = read(f"{DOCS_DIR}/doc_{doc}.txt")
        found = SECRET_MARKER in text
        turns.append((doc, found))
        if found:
            answer = text.split(SECRET_MARKER, 1)[1].strip()
            break
    write("answer.txt", answer)
    files = ["answer.txt"]
    if r.random() < UNTIDY_PROBABILITY:
        write("scratch.tmp", "notes\n")
        files.append("scratch.tmp")
    return turns, answer, files
