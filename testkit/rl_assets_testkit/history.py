"""A long experiment's history written in bulk into a home's Dagster instance and ledgers: scale tests and benchmarks.

Creating a run through Dagster costs about 0.1 s of storage calls, so 10^5-10^6 trial runs of history are written
as rows instead, each as Dagster stores the run the driver launches: the serialized run as its body, and the tags
the driver gives it (experiment, rubric, partition and its dimensions, kind). Every trained step has its ledger
row, its weights materialization and a materialization of each trial's reward; the open step has ``in_flight``
runs created and not yet started (nothing in the home launches or monitors those). Materializations are copies of
one real event per asset with the partition changed: what is read of them at scale is the index, not the body.
The weights' copies (one a step) get their own body too: their step, and the numeric metadata of a trained step as
its summary row has it (every trial ok, reward 0.5, 3 turns), which the UI plots across partitions by the body's
partition.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg

from rl_assets.assets.partitions import STEP, TRIAL_SLOT, WORLD, trial_partition_key
from rl_assets.domain.experiment import ExperimentConfig, parse_step_key
from rl_assets.domain.run_tags import EXPERIMENT_TAG, KIND_TAG, PARTITION_TAG, RUBRIC_TAG
from rl_assets.stores.home_stores import Stores
from rl_assets.workloads.registry import workload_of
from rl_assets_testkit.bulk_history import BulkHistory, RunRow


@dataclass(frozen=True)
class History:
    runs: int
    """Runs written: worlds, every trial and training step of the trained steps, the open step's in flight."""
    trained_steps: int
    in_flight: int


def _run(job: str, key: str, tags: dict[str, str], status: dg.DagsterRunStatus) -> RunRow:
    tags = {**tags, "dagster/partition": key, PARTITION_TAG: key}
    run = dg.DagsterRun(job_name=job, run_id=str(uuid.uuid4()), status=status, tags=tags)
    return RunRow(run.run_id, job, status.value, dg.serialize_value(run), key, tags)


def _materializations(
    instance: dg.DagsterInstance,
    bulk: BulkHistory,
    asset: str,
    keys: list[str],
    metadata_of: Callable[[str], dict[str, Any]] | None = None,
) -> None:
    """Materializations of ``asset`` for ``keys``: the first reported for real, the rest copies of its row.

    With ``metadata_of``, each copy's body is the first's with its own partition and metadata.
    """
    if not keys:
        return
    metadata = metadata_of(keys[0]) if metadata_of else None
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=asset, partition=keys[0], metadata=metadata))
    seed = instance.get_latest_storage_id_by_partition(
        dg.AssetKey(asset), dg.DagsterEventType.ASSET_MATERIALIZATION, partitions={keys[0]}
    )[keys[0]]
    if metadata_of is None:
        bulk.copy_event(seed, keys[1:])
        return
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), storage_ids=[seed]), limit=1
    ).records
    entry = records[0].event_log_entry
    event = entry.get_dagster_event()
    data = event.event_specific_data

    def body(key: str) -> str:
        materialization = dg.AssetMaterialization(asset_key=asset, partition=key, metadata=metadata_of(key))
        copy = event._replace(event_specific_data=data._replace(materialization=materialization))
        return dg.serialize_value(entry._replace(dagster_event=copy))

    bulk.copy_event_with_bodies(seed, {key: body(key) for key in keys[1:]})


UNSTARTED_HOLD_S = 3600.0
"""The open step's runs in flight are stamped as created this far ahead: the home's run monitoring fails a run
not started within its start timeout (60 s, counted from creation), which would end them while they are measured."""


def write_history(
    instance: dg.DagsterInstance, stores: Stores, config: ExperimentConfig, trained_steps: int, in_flight: int = 0
) -> History:
    """Write ``config``'s first ``trained_steps`` steps as finished and ``in_flight`` runs of the next one.

    ``config`` must be recorded in the home already (``stores.experiments``); nothing is launched.
    """
    if not 0 <= trained_steps < config.steps:
        raise ValueError(f"trained_steps must leave an open step: 0..{config.steps - 1}, got {trained_steps}")
    bulk = BulkHistory(stores.db)
    base = {EXPERIMENT_TAG: config.name, RUBRIC_TAG: config.rubric}
    success, created = dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.NOT_STARTED
    instance.add_dynamic_partitions(WORLD.name, config.world_ids)
    instance.add_dynamic_partitions(TRIAL_SLOT.name, config.trial_slots())
    instance.add_dynamic_partitions(STEP.name, [config.step_key(s) for s in range(trained_steps + 1)])
    start = time.time() - 60.0 * (trained_steps + 1)
    worlds = [_run("world_job", w, {**base, KIND_TAG: "world"}, success) for w in config.world_ids]
    bulk.add_runs(worlds, start)
    written = len(worlds)
    reward_keys: list[str] = []
    settled: list[str] = []
    for step in range(trained_steps + 1):
        step_key = config.step_key(step)
        runs = []
        for slot in config.trial_slots():
            key = str(trial_partition_key(config, step, slot))
            dims = {"dagster/partition/step": step_key, "dagster/partition/trial": slot}
            status = success if step < trained_steps else created
            if step < trained_steps or len(runs) < in_flight:
                runs.append(_run("trial_job", key, {**base, **dims, KIND_TAG: "trial"}, status))
            if step < trained_steps:
                reward_keys.append(key)
                settled.append(f"s{step}-{slot}")
        if step < trained_steps:
            runs.append(_run("train_job", step_key, {**base, KIND_TAG: "train"}, success))
        bulk.add_runs(runs, start + 60.0 * step if step < trained_steps else time.time() + UNSTARTED_HOLD_S)
        written += len(runs)
    policy = workload_of(config).trainer.initial(config)  # the last trained step's checkpoint, readable
    if trained_steps:
        stores.checkpoints.save(config.name, config.rubric, trained_steps - 1, policy)
    bulk.add_ledger_steps(config.name, config.rubric, trained_steps, policy.content_hash)
    bulk.add_summaries(config.name, config.rubric, trained_steps, len(config.trial_slots()))
    bulk.add_attempts(config.name, settled)
    _materializations(instance, bulk, "worlds", config.world_ids)
    _materializations(instance, bulk, "rewards", reward_keys)
    trials = len(config.trial_slots())

    def trained(step_key: str) -> dict[str, Any]:
        step = parse_step_key(step_key)[1]
        return {"step": step, "trials_planned": trials, "trials_ok": trials, "mean_reward": 0.5, "mean_turns": 3.0}

    _materializations(instance, bulk, "weights", [config.step_key(s) for s in range(trained_steps)], trained)
    bulk.analyze()
    return History(written, trained_steps, min(in_flight, len(config.trial_slots())))
