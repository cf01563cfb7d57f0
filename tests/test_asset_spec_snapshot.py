"""Every asset spec of the code location against a reviewed snapshot, as dagster-open-platform keeps its own.

A change to an asset's key, partitions, code version, pool, group, dependencies (with their partition
mappings), backfill policy, definition metadata or asset checks (name, partitions, blocking) fails this
test until the snapshot is regenerated on purpose
(``RL_ASSETS_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_asset_spec_snapshot.py``) and the diff reviewed
with the change: a code version bump re-materializes history, a partition change orphans it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg

from rl_assets.definitions import defs

SNAPSHOT = Path(__file__).parent / "snapshots" / "asset_specs.json"
UPDATE_ENV = "RL_ASSETS_UPDATE_SNAPSHOTS"


def _partitions(partitions_def: dg.PartitionsDefinition | None) -> Any:
    if partitions_def is None:
        return None
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return {d.name: _partitions(d.partitions_def) for d in partitions_def.partitions_defs}
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        return f"dynamic:{partitions_def.name}"
    return type(partitions_def).__name__


def _mapping(mapping: dg.PartitionMapping) -> str:
    if isinstance(mapping, dg.MultiToSingleDimensionPartitionMapping):
        return f"MultiToSingleDimensionPartitionMapping({mapping.partition_dimension_name})"
    return type(mapping).__name__


def asset_specs() -> dict[str, dict[str, Any]]:
    """What the snapshot records of each asset, in a stable JSON shape."""
    graph = defs.resolve_asset_graph()
    specs = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets_def = defs.resolve_assets_def(key)
        specs[key.to_user_string()] = {
            "partitions": _partitions(node.partitions_def),
            "code_version": node.code_version,
            "pool": assets_def.op.pool,
            "group": node.group_name,
            "observable": node.is_observable,
            "deps": {
                parent.to_user_string(): _mapping(graph.get_partition_mapping(key, parent))
                for parent in sorted(node.parent_keys, key=lambda k: k.to_user_string())
            },
            "backfill_policy": None if node.backfill_policy is None else str(node.backfill_policy.policy_type.value),
            "metadata_keys": sorted(node.metadata),
            "tags": dict(sorted(node.tags.items())),
            "checks": {
                spec.name: {"partitions": _partitions(spec.partitions_def), "blocking": spec.blocking}
                for spec in sorted(assets_def.check_specs, key=lambda c: c.name)
                if spec.asset_key == key
            },
        }
    return specs


def test_asset_specs_match_the_reviewed_snapshot():
    current = asset_specs()
    if os.environ.get(UPDATE_ENV):
        SNAPSHOT.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    recorded = json.loads(SNAPSHOT.read_text())
    assert current == recorded, (
        f"asset specs changed; review the change, then regenerate with {UPDATE_ENV}=1 "
        f"(recorded {json.dumps(recorded, sort_keys=True)}, now {json.dumps(current, sort_keys=True)})"
    )
