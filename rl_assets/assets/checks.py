"""The invariants as Dagster asset checks, evaluated in the step that materializes their asset.

Each asset declares its checks (``check_specs``) and returns their results
with its materialization, so every materialization carries its checks at no
extra run or process, per partition in the UI's partition view. The checks
are blocking: a failed one fails the step after the materialization is
recorded, so nothing downstream in the same run (a backfill's weights after
its rewards) trains on a record that broke an invariant. What each check
decides is :mod:`rl_assets.domain.invariants`, on records gathered by
:mod:`rl_assets.views.invariant_records`; ``rl-assets report`` runs the same decisions.

A run of several weights partitions (a backfill's single run) reports one
result per check for the whole chain: it passes if every step passes, and
its metadata holds each step's finding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dagster as dg

from rl_assets.assets.partitions import STEP, TRIAL, WORLD
from rl_assets.domain.invariants import (
    APPLIED_ONCE,
    ON_POLICY,
    ONE_VERDICT,
    PARENT_CHAIN,
    REWARD_IN_RANGE,
    WORLD_SEALED,
    Finding,
    Invariant,
)


def _specs(invariants: Sequence[Invariant], partitions_def: dg.PartitionsDefinition) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            i.name, asset=i.asset, description=i.description, blocking=i.blocking, partitions_def=partitions_def
        )
        for i in invariants
    ]


WORLD_CHECKS = _specs([WORLD_SEALED], WORLD)
REWARD_CHECKS = _specs([ONE_VERDICT, REWARD_IN_RANGE], TRIAL)
WEIGHTS_CHECKS = _specs([APPLIED_ONCE, PARENT_CHAIN, ON_POLICY], STEP)


def check_results(asset: str, findings: Mapping[str, Finding]) -> list[dg.AssetCheckResult]:
    """One unit's findings as the asset's check results."""
    return [
        dg.AssetCheckResult(
            asset_key=asset, check_name=name, passed=f.passed, description=f.detail, metadata={"finding": f.detail}
        )
        for name, f in findings.items()
    ]


def chain_check_results(asset: str, findings: Sequence[Mapping[str, Finding]]) -> list[dg.AssetCheckResult]:
    """Several units' findings (one run of several partitions) as one result per check, passing if all pass."""
    results = []
    for name in findings[0]:
        each = [f[name] for f in findings]
        failures = [f.detail for f in each if not f.passed]
        results.append(
            dg.AssetCheckResult(
                asset_key=asset,
                check_name=name,
                passed=not failures,
                description="; ".join(failures) or f"all {len(each)} passed",
                metadata={"findings": dg.MetadataValue.json([{"passed": f.passed, "finding": f.detail} for f in each])},
            )
        )
    return results
