"""``worlds``: each world built once (under its lock), sealed read-only, content hash recorded; rebuilt if damaged."""

import dagster as dg

from rl_assets.assets.checks import WORLD_CHECKS, check_results
from rl_assets.assets.partitions import WORLD
from rl_assets.resources.stores import StoresResource
from rl_assets.resources.world_store import WorldStoreResource
from rl_assets.views.invariant_records import world_findings


@dg.asset(
    partitions_def=WORLD,
    code_version="world-v1",
    group_name="rl",
    check_specs=WORLD_CHECKS,
    description=(
        "A sealed world: the documents (or the task's files) a trial's agent works on through its private fork."
    ),
)
def worlds(
    context: dg.AssetExecutionContext, world_store: WorldStoreResource, stores: StoresResource
) -> dg.MaterializeResult:
    world_id = context.partition_key
    digest, built_now = world_store.ensure_built(world_id)
    stores.stores.damage.repaired("world", world_id)
    return dg.MaterializeResult(
        metadata={
            "content_hash": digest,
            "location": world_store.location(world_id),
            "built_now": built_now,
        },
        data_version=dg.DataVersion(digest),
        check_results=check_results("worlds", world_findings(world_store.verified_hash, world_id, digest)),
    )
