"""Before driving: check the durable records the work ahead rests on (or, asked to, every record).

The planner trusts Dagster's materializations; this audit checks that what
they point at is still intact: each sealed world's content hash (re-hashed
from every byte: the only full read of a world outside its build), the
finished trials' trajectory and reward records and their verdicts, and the
checkpoints against the ledger's policy hashes.

By default that is the work ahead: every world (the experiment's, not its
history's), the trials of the last trained step and of the training frontier,
the checkpoint the next step starts from, and the verdicts already known to be
modified; so a ``train`` that resumes a long experiment reads a step, not the
history. ``everything`` reads every trial and checkpoint of the experiment
(``train --audit``). An older record is read again by whatever uses it next
(a re-scoring's judge, the trainer), through the same checksums. A damaged
record is moved to the home's ``quarantine/`` and its unit is marked damaged
(see :mod:`rl_assets.stores.damage` and
:func:`~rl_assets.stores.quarantine.read_or_quarantine`), so the driver regenerates exactly that
unit; every other unit, and every intact verdict and rollout, is reused.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from dagster import DagsterInstance

from rl_assets.assets.partitions import trial_partition_key
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.driver.planner import materialized_partitions
from rl_assets.stores.damage import Damage, DamageKind
from rl_assets.stores.home_stores import Stores
from rl_assets.stores.quarantine import read_or_quarantine
from rl_assets.worlds.local import LocalWorlds, WorldTamperedError


def _trial_key(config: ExperimentConfig, trial_id: str) -> str:
    step, slot = trial_id.split("-", 1)
    return str(trial_partition_key(config, int(step.removeprefix("s")), slot))


def _audited_steps(stores: Stores, config: ExperimentConfig, everything: bool) -> list[int]:
    if everything:
        return list(range(config.steps))
    frontier = stores.training.frontier(config.name, config.rubric)
    return [s for s in (frontier - 1, frontier) if 0 <= s < config.steps]


def audit(
    instance: DagsterInstance, stores: Stores, worlds: LocalWorlds, config: ExperimentConfig, *, everything: bool
) -> list[Damage]:
    """Mark damaged units of ``config``; returns the damage found now (already-open damage is not repeated)."""
    found: list[Damage] = []

    def damaged(kind: DamageKind, key: str, detail: str) -> None:
        if stores.damage.report(kind, key, detail):
            found.append(Damage(kind, key, detail))

    built = materialized_partitions(instance, "worlds", set(config.world_ids))
    for world_id in config.world_ids:
        if world_id in built:
            try:  # every byte here, once per `train`; trial attempts check only the seal (O(entries))
                worlds.audited_hash(world_id)
                worlds.verified_hash(world_id)
            except (WorldTamperedError, FileNotFoundError) as err:
                damaged("world", world_id, str(err))

    def checked(read: Callable[[], object | None], what: str, kind: DamageKind, key: str) -> bool:
        """Whether the record is usable; if not, it is quarantined (if damaged) and its unit marked damaged."""
        result = read_or_quarantine(stores.artifacts, stores.damage, read, what, kind, key)
        if result.newly_damaged:
            found.append(Damage(kind, key, str(result.problem)))
        return result.problem is None

    for step in _audited_steps(stores, config, everything):
        slots = [spec.trial_id.split("-", 1)[1] for spec in config.trials(step)]
        keys = {slot: str(trial_partition_key(config, step, slot)) for slot in slots}
        rewarded = materialized_partitions(instance, "rewards", set(keys.values()))  # a query a step
        for slot, key in keys.items():
            if key not in rewarded:
                continue
            if checked(partial(stores.trials.trajectory, config.name, step, slot), "trajectory", "trial", key):
                checked(partial(stores.trials.reward, config.name, config.rubric, step, slot), "reward", "trial", key)

    rubric_hash = stores.rubrics.get(config.rubric).content_hash  # the home's registry, not just the built-ins
    for verdict_key in stores.verdicts.damaged_keys(f"{config.name}:"):
        if f":{rubric_hash}:" not in verdict_key:
            continue  # another rubric's verdict: repaired when that rubric is next used
        for trial_id in stores.attempts.trials_judged_with(verdict_key):
            damaged("trial", _trial_key(config, trial_id), "its verdict was modified; it is judged again")

    applied_steps = stores.training.steps(config.name, config.rubric)
    for applied in applied_steps if everything else applied_steps[-1:]:
        checked(
            partial(stores.checkpoints.load, config.name, config.rubric, applied.step, applied.policy_hash),
            "checkpoint",
            "step",
            config.step_key(applied.step),
        )
    return found
