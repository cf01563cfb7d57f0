"""The rubric as an input: the ``rubrics`` source asset, and the rubric a run judges with.

``rubrics`` is an observable source asset whose data version is the hash of
every usable rubric in the registry, so a new or changed rubric marks the
rewards stale (and through them the weights) and leaves trajectories and
worlds fresh: re-scoring never regenerates. Which rubric a run judges and
trains with is its ``rl/rubric`` tag (set by the driver, the re-scoring
sensor, or a UI backfill's tags), else the experiment's own rubric.
"""

from collections.abc import Mapping

import dagster as dg

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.rubrics import AnyRubric
from rl_assets.domain.run_tags import rubric_of
from rl_assets.resources.stores import StoresResource
from rl_assets.stores.home_stores import Stores


@dg.observable_source_asset(
    group_name="rl",
    description="The rubric registry (built-in rubrics and the home's rubrics/ folder); version = its content hash.",
)
def rubrics(stores: StoresResource) -> dg.ObserveResult:
    registry = stores.stores.rubrics
    usable = registry.all()
    return dg.ObserveResult(
        data_version=dg.DataVersion(registry.version()),
        metadata={
            "rubrics": ", ".join(f"{name} ({r.content_hash})" for name, r in usable.items()),
            "unusable_files": "; ".join(registry.problems()) or "none",
        },
    )


def run_rubric(tags: Mapping[str, str], state: Stores, config: ExperimentConfig) -> AnyRubric:
    """The rubric a run with these tags judges and trains with, resolved (and pinned) through the registry."""
    return state.rubrics.get(rubric_of(tags, config.rubric))
