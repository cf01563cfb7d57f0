"""``weights``: one training step, applied exactly once by the Ray trainer, per rubric.

The batch is canonical: the step's rewards sorted by trial id, read from the
reward store for the trials the experiment planned. A trial that failed for
good is absent (``skip``), or takes its prompt group with it (``mask-group``).
"""

import time
from collections import defaultdict
from typing import Any

import dagster as dg

from rl_assets.assets.partitions import STEP, trial_partition_key
from rl_assets.assets.policy import parent_policy
from rl_assets.assets.rubrics import run_rubric
from rl_assets.domain.bandit import canonical_batch, step_summary
from rl_assets.domain.experiment import ExperimentConfig, parse_step_key
from rl_assets.domain.models import Reward
from rl_assets.resources.stores import Stores, StoresResource
from rl_assets.resources.trainer import TrainerResource
from rl_assets.stores.artifacts import CorruptArtifactError

BACKFILL_WAIT_S = 3600.0
"""How long a backfill's weights run waits for an earlier step's rewards to be judged."""
BACKFILL_POLL_S = 2.0
BACKFILL_TAG = "dagster/backfill"


class DamagedRecordError(RuntimeError):
    """A record a result depends on was damaged; its unit is marked for regeneration."""


def step_batch(state: Stores, config: ExperimentConfig, step: int) -> tuple[list[Reward], list[str]]:
    """``(canonical batch, trial ids left out)`` of a step."""
    failed = state.attempts.failed_trials(config.name)
    present: dict[str, Reward] = {}
    missing = []
    for spec in config.trials(step):
        slot = spec.trial_id.split("-", 1)[1]
        try:
            reward = state.trials.reward(config.name, config.rubric, step, slot)
        except CorruptArtifactError as err:
            state.artifacts.quarantine(err.path)
            state.damage.report("trial", str(trial_partition_key(config, step, slot)), f"reward record damaged: {err}")
            raise DamagedRecordError(
                f"the reward record of {spec.trial_id} was damaged and is quarantined; "
                "`rl-assets train` judges it again (from the recorded verdict) and retrains"
            ) from None
        if reward is None:
            if spec.trial_id not in failed:
                raise dg.Failure(
                    f"{spec.trial_id} has neither a reward nor a recorded failure; its step cannot train yet",
                    allow_retries=False,
                )
            missing.append(spec.trial_id)
        else:
            present[spec.trial_id] = reward
    if config.failed_trial_policy == "mask-group":
        masked_groups = {t.rsplit("-", 1)[0] for t in missing}
        for trial_id in list(present):
            if trial_id.rsplit("-", 1)[0] in masked_groups:
                missing.append(trial_id)
                del present[trial_id]
    return canonical_batch(list(present.values())), sorted(missing)


def _train_step(
    context: dg.AssetExecutionContext, state: Stores, trainer: TrainerResource, config: ExperimentConfig, step: int
) -> dict[str, Any]:
    """Train one step of ``config`` (already seen under the run's rubric); returns its metadata."""
    parent = parent_policy(state, config, step)
    batch, left_out = step_batch(state, config, step)
    policy, applied, applied_now = trainer.train_step(
        state.training, state.checkpoints, config.name, config.rubric, step, parent, batch, config.lr, config.workload
    )
    state.damage.repaired("step", config.step_key(step))
    where = f"step {step} of {config.name} under {config.rubric}"
    if applied_now:
        context.log.info(f"applied {where}: version {policy.version} by actor {applied.actor_pid}")
    else:
        context.log.info(f"{where} was already applied; reusing its checkpoint")
    mean_reward, mean_turns = step_summary(batch)
    metadata: dict[str, Any] = {
        "step": step,
        "trials_planned": len(config.trials(step)),
        "trials_ok": len(batch),
        "trials_left_out": ", ".join(left_out) or "none",
        "weights_version": policy.version,
        "policy_hash": policy.content_hash,
        "parent_hash": parent.content_hash,
        "rubric": config.rubric,
        "actor_pid": applied.actor_pid,
        "applied_now": applied_now,
    }
    if mean_reward is not None:  # plain floats: Dagster plots them across partitions, and JSON carries them
        metadata["mean_reward"] = mean_reward
        metadata["mean_turns"] = mean_turns
    return metadata


def _unsettled(state: Stores, config: ExperimentConfig, step: int) -> list[str]:
    """Trials of ``step`` with neither a reward under the config's rubric nor a recorded failure."""
    failed = state.attempts.failed_trials(config.name)
    return [
        spec.trial_id
        for spec in config.trials(step)
        if spec.trial_id not in failed
        and not state.trials.has_reward(config.name, config.rubric, step, spec.trial_id.split("-", 1)[1])
    ]


def _train_earlier_steps(
    context: dg.AssetExecutionContext, state: Stores, trainer: TrainerResource, config: ExperimentConfig, step: int
) -> None:
    """Train the untrained steps before ``step``, in order, once their rewards are judged.

    A backfill launches weights partitions as their rewards finish, so a later
    step's run can start before an earlier step's. Training the missing parents
    here (the ledger makes that exactly once, whichever run gets there first)
    keeps the chain in step order; waiting for the parent's own run instead
    could deadlock on the ``train`` pool.
    """
    first = step
    while first > 0 and state.training.get(config.name, config.rubric, first - 1) is None:
        first -= 1
    for earlier in range(first, step):
        deadline = time.monotonic() + BACKFILL_WAIT_S
        while waiting := _unsettled(state, config, earlier):
            if time.monotonic() > deadline:
                raise dg.Failure(
                    f"step {earlier} of {config.name}: {waiting} not judged within {BACKFILL_WAIT_S:.0f} s"
                )
            context.log.info(f"step {step} waits for step {earlier}'s rewards: {', '.join(waiting)}")
            time.sleep(BACKFILL_POLL_S)  # other runs of the backfill are judging them
        context.log.info(f"training step {earlier} of {config.name} first: step {step} starts from it")
        _train_step(context, state, trainer, config, earlier)


@dg.asset(
    partitions_def=STEP,
    deps=[dg.AssetDep("rewards", partition_mapping=dg.MultiToSingleDimensionPartitionMapping("step"))],
    code_version="weights-v1",
    group_name="rl",
    pool="train",
    backfill_policy=dg.BackfillPolicy.single_run(),
    description="The policy after one training step (bandit priors), checkpointed and ledgered.",
)
def weights(
    context: dg.AssetExecutionContext, stores: StoresResource, trainer: TrainerResource
) -> dg.MaterializeResult:
    """One step normally; a whole chain, in step order, when a backfill retrains after re-scoring.

    A backfill may split the chain over several runs; each trains any earlier step still missing first.
    """
    state = stores.stores
    chains: dict[str, list[int]] = defaultdict(list)
    for key in context.partition_keys:
        experiment, step = parse_step_key(key)
        chains[experiment].append(step)
    trained: list[dict[str, Any]] = []
    for experiment, steps in sorted(chains.items()):
        config = state.experiments.get(experiment)
        scored = config.scored_with(run_rubric(context, state, config).name)
        if len(steps) > 1:
            context.log.info(f"retraining {experiment} under {scored.rubric} in step order: {sorted(steps)}")
        for step in sorted(steps):
            if BACKFILL_TAG in context.run.tags:
                _train_earlier_steps(context, state, trainer, scored, step)
            trained.append(_train_step(context, state, trainer, scored, step))
    if len(trained) == 1:
        metadata = trained[0]
        return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(str(metadata["policy_hash"])))
    return dg.MaterializeResult(metadata={"steps": dg.MetadataValue.json(trained)})
