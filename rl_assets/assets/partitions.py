"""Partitions: worlds by id, steps by experiment and index, trials by step and slot.

Dynamic partitions are global to a Dagster instance, so step keys carry the
experiment (``ref/s0``) while world keys (``w0``) do not: a world's content
depends on its id alone, so experiments share it. A trial partition is
``step|slot`` (``ref/s0|p1-n0``, dimensions sorted by name); its trial id is
``s0-p1-n0``. The multi-partition is a cross product, which is why a trial's
dimension is its slot within a step (the same slots every step) and not its id.
"""

from __future__ import annotations

import dagster as dg

from rl_assets.domain.experiment import ExperimentConfig, parse_step_key

WORLD = dg.DynamicPartitionsDefinition(name="world")
STEP = dg.DynamicPartitionsDefinition(name="step")
TRIAL_SLOT = dg.DynamicPartitionsDefinition(name="trial")
TRIAL = dg.MultiPartitionsDefinition({"step": STEP, "trial": TRIAL_SLOT})


def trial_partition_key(config: ExperimentConfig, step: int, slot: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"step": config.step_key(step), "trial": slot})


def parse_trial_partition(key: dg.MultiPartitionKey | str) -> tuple[str, int, str]:
    """``"ref/s0|p1-n0"`` -> ``("ref", 0, "p1-n0")``."""
    if isinstance(key, dg.MultiPartitionKey):
        dims = key.keys_by_dimension
        step_key, slot = dims["step"], dims["trial"]
    else:
        step_key, slot = key.split("|")
    experiment, step = parse_step_key(step_key)
    return experiment, step, slot


def partitions_to_add(config: ExperimentConfig, steps: int) -> dict[str, list[str]]:
    """Dynamic partition keys the first ``steps`` steps of an experiment need."""
    return {
        WORLD.name: config.world_ids,
        TRIAL_SLOT.name: config.trial_slots(),
        STEP.name: [config.step_key(s) for s in range(steps)],
    }
