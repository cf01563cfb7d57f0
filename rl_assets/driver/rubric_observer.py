"""``rubric_observer``: the rubric registry observed automatically, so the UI knows its versions.

The ``rubrics`` source asset is observed only when something observes it;
unobserved, the UI says "Never observed" and cannot tell that a new rubric
makes the rewards (and through them the weights) stale. This sensor runs by
default and records an observation of ``rubrics``, with the registry's data
version, whenever that version differs from the one it last recorded (its
cursor, and the newest observation on record): no run is launched and an unchanged registry adds no event,
even across a daemon killed mid-tick. It
re-scores nothing; that is ``rubric_sensor``'s opt-in job.
"""

from __future__ import annotations

import dagster as dg

from rl_assets.driver.tick_instance import tick_instance
from rl_assets.resources.stores import StoresResource

OBSERVE_INTERVAL_S = 30
DATA_VERSION_TAG = "dagster/data_version"
"""The tag an observation's data version travels in (what ``ObserveResult(data_version=...)`` becomes)."""


def rubrics_observation(stores: StoresResource) -> tuple[str, dg.AssetObservation]:
    """The registry's version and an observation of ``rubrics`` carrying it, with what the registry holds."""
    registry = stores.stores.rubrics
    version = registry.version()
    observation = dg.AssetObservation(
        asset_key="rubrics",
        tags={DATA_VERSION_TAG: version},
        metadata={
            "rubrics": ", ".join(f"{name} ({r.content_hash})" for name, r in registry.all().items()),
            "unusable_files": "; ".join(registry.problems()) or "none",
        },
    )
    return version, observation


@dg.sensor(
    minimum_interval_seconds=OBSERVE_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Observes the rubric registry: records its data version whenever it changes, so the UI shows "
    "which rubric versions exist and which rewards and weights a new one makes stale. Launches nothing.",
)
def rubric_observer(context: dg.SensorEvaluationContext, stores: StoresResource) -> dg.SensorResult | dg.SkipReason:
    version, observation = rubrics_observation(stores)
    if context.cursor == version or last_observed_version(tick_instance(context)) == version:
        return dg.SensorResult(skip_reason=f"rubric registry unchanged (version {version})", cursor=version)
    return dg.SensorResult(asset_events=[observation], cursor=version)


def last_observed_version(instance: dg.DagsterInstance) -> str | None:
    """The data version of the newest observation of ``rubrics`` (one indexed read).

    The cursor alone is not enough: a daemon killed after its tick recorded the observation but before it
    saved the cursor would observe the same version again on its next life.
    """
    records = instance.fetch_observations(dg.AssetKey("rubrics"), limit=1).records
    return records[0].asset_observation.tags.get(DATA_VERSION_TAG) if records else None
