"""The built-in rubrics of the reference workload."""

from __future__ import annotations

from rl_assets.domain.models import Rubric

BUILTIN_RUBRICS: dict[str, Rubric] = {
    r.name: r
    for r in (
        Rubric(name="v1", correctness_weight=1.0, efficiency_weight=0.3, tidiness_weight=0.1),
        Rubric(name="v2-efficiency", correctness_weight=1.0, efficiency_weight=1.0, tidiness_weight=0.5),
    )
}


class UnknownRubricError(ValueError):
    """Raised for a rubric name that is not registered."""


def get_rubric(name: str) -> Rubric:
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
