"""The built-in rubrics: the reference workload's weights, and the LLM judge's default prompt.

A rubric is one of two kinds, told apart by its fields: a :class:`~rl_assets.domain.models.Rubric`
weighs the reference judge's three criteria; a :class:`~rl_assets.domain.judge_rubric.JudgeRubric`
is an LLM judge's prompt template and scale. Both live in the same registry, pinned by hash alike.
"""

from __future__ import annotations

from rl_assets.domain.judge_rubric import DEFAULT_JUDGE_RUBRIC, JudgeRubric
from rl_assets.domain.models import Rubric

AnyRubric = Rubric | JudgeRubric
"""A rubric of either kind."""

BUILTIN_RUBRICS: dict[str, AnyRubric] = {
    r.name: r
    for r in (
        Rubric(name="v1", correctness_weight=1.0, efficiency_weight=0.3, tidiness_weight=0.1),
        Rubric(name="v2-efficiency", correctness_weight=1.0, efficiency_weight=1.0, tidiness_weight=0.5),
        DEFAULT_JUDGE_RUBRIC,
    )
}


def describe(rubric: AnyRubric) -> str:
    """One line saying what a rubric weighs (or, for an LLM judge's, what its scale means)."""
    if isinstance(rubric, JudgeRubric):
        scale = rubric.scale if len(rubric.scale) <= 70 else rubric.scale[:67] + "..."
        return f"LLM judge: {scale}"
    return (
        f"correctness {rubric.correctness_weight:g}, efficiency {rubric.efficiency_weight:g}, "
        f"tidiness {rubric.tidiness_weight:g}"
    )


def kind_problem(rubric: AnyRubric, llm_judge: bool) -> str | None:
    """Why ``rubric`` cannot judge an experiment whose judge is (or is not) an LLM; None if it can."""
    if llm_judge and not isinstance(rubric, JudgeRubric):
        return f"rubric {rubric.name!r} weighs the reference judge's criteria; an LLM judge needs a judge rubric"
    if not llm_judge and isinstance(rubric, JudgeRubric):
        return f"rubric {rubric.name!r} is an LLM judge's prompt; this experiment's judge is not an LLM"
    return None


class UnknownRubricError(ValueError):
    """Raised for a rubric name that is not registered."""


def get_rubric(name: str) -> AnyRubric:
    """The built-in rubric called ``name``, or a clear error listing the known ones.

    Only the in-memory oracle uses this; everything that runs looks a rubric
    up through the home's registry (:class:`rl_assets.stores.rubrics.RubricRegistry`),
    which also knows the home's rubric files.
    """
    try:
        return BUILTIN_RUBRICS[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_RUBRICS))
        raise UnknownRubricError(f"unknown rubric {name!r} (known: {known})") from None
