"""``weights``: one training step, applied exactly once by the Ray trainer, per rubric.

The batch is canonical: the step's rewards sorted by trial id, read from the
reward store for the trials the experiment planned. A trial that failed for
good is absent (``skip``), or takes its prompt group with it (``mask-group``).
"""

from collections import defaultdict
from functools import partial
from typing import Any

import dagster as dg

from rl_assets.assets import pools
from rl_assets.assets.checks import WEIGHTS_CHECKS, chain_check_results, check_results
from rl_assets.assets.partitions import STEP, trial_partition_key
from rl_assets.assets.policy import parent_policy
from rl_assets.assets.rubrics import run_rubric
from rl_assets.domain.experiment import ExperimentConfig, parse_step_key
from rl_assets.domain.language_model import LanguageModelPolicy
from rl_assets.domain.models import Reward, TrialSpec
from rl_assets.domain.waiting import Waiting
from rl_assets.resources.stores import StoresResource
from rl_assets.resources.trainer import TrainerResource
from rl_assets.stores.home_stores import Stores
from rl_assets.stores.quarantine import read_or_quarantine
from rl_assets.stores.training import StepSummary
from rl_assets.trainer.batches import DamagedRecordError, UnsettledTrialError, step_batch
from rl_assets.views.invariant_records import step_findings

BACKFILL_WAIT_S = 3600.0
"""How long a backfill's weights run waits for an earlier step's rewards to be judged."""
BACKFILL_POLL_S = 2.0
BACKFILL_TAG = "dagster/backfill"


def _training_batch(state: Stores, config: ExperimentConfig, step: int) -> tuple[list[Reward], list[str]]:
    """The step's batch to train on; a damaged reward is quarantined and its trial marked for judging again."""

    def read(spec: TrialSpec, slot: str) -> Reward | None:
        checked = read_or_quarantine(
            state.artifacts,
            state.damage,
            partial(state.trials.reward, config.name, config.rubric, step, slot),
            "reward",
            "trial",
            str(trial_partition_key(config, step, slot)),
            missing_is_damage=False,  # a trial that failed for good has none; step_batch tells the two apart
        )
        if checked.problem is not None:
            raise DamagedRecordError(
                f"the reward record of {spec.trial_id} was damaged and is quarantined; "
                "`rl-assets train` judges it again (from the recorded verdict) and retrains"
            )
        return checked.record

    try:
        return step_batch(config, step, state.attempts.failed_trials(config.name), read)
    except UnsettledTrialError as err:
        raise dg.Failure(str(err), allow_retries=False) from None


def _language_model_metadata(lm: LanguageModelPolicy) -> dict[str, Any]:
    """A GRPO step's checkpoint (the digest of its directory under ``artifacts/models``) and its stats."""
    metadata: dict[str, Any] = {"checkpoint": lm.checkpoint or "base weights", "parameters": lm.parameters or 0}
    if lm.stats is not None:
        stats = lm.stats.model_dump(exclude_none=True)
        metadata.update({k: v for k, v in stats.items() if k != "groups"})
    return metadata


def _train_step(
    context: dg.AssetExecutionContext, state: Stores, trainer: TrainerResource, config: ExperimentConfig, step: int
) -> dict[str, Any]:
    """Train one step of ``config`` (already seen under the run's rubric); returns its metadata."""
    parent = parent_policy(state, config, step)
    batch, left_out = _training_batch(state, config, step)
    policy, applied, applied_now = trainer.train_step(
        state.training, state.checkpoints, config.name, config.rubric, step, parent, batch, config.lr, config.workload
    )
    state.damage.repaired("step", config.step_key(step))
    where = f"step {step} of {config.name} under {config.rubric}"
    if applied_now:
        context.log.info(f"applied {where}: version {policy.version} by actor {applied.actor_pid}")
    else:
        context.log.info(f"{where} was already applied; reusing its checkpoint")
    _release_after_last_step(context, state, trainer, config, step)
    summary = StepSummary.of_batch(config, step, batch)
    state.training.summarize(summary)
    mean_reward, mean_turns, planned = summary.mean_reward, summary.mean_turns, summary.trials_planned
    metadata: dict[str, Any] = {
        "step": step,
        "trials_planned": planned,
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
    if policy.lm is not None:  # a language model: its checkpoint and what its GRPO step saw, plotted per step
        metadata.update(_language_model_metadata(policy.lm))
    for usage in state.model_calls.usage(config.name, step):  # a task experiment's bill for this step
        metadata[f"{usage.role}_calls"] = metadata.get(f"{usage.role}_calls", 0) + usage.calls
        metadata[f"{usage.role}_tokens"] = (
            metadata.get(f"{usage.role}_tokens", 0) + usage.prompt_tokens + usage.completion_tokens
        )
    return metadata


def _release_after_last_step(
    context: dg.AssetExecutionContext, state: Stores, trainer: TrainerResource, config: ExperimentConfig, step: int
) -> None:
    """End the experiment's trainer actor once this chain's last step is in the ledger and no other chain of the
    experiment (its own rubric's, a requested re-scoring's) is still training: the chains share the actor.

    Best effort: the step is done either way (its ledger row and checkpoint are written), so a release that
    fails (the cluster unreachable, say) leaves an idle actor and a warning, never a failed step.
    """
    if step != config.steps - 1:
        return
    others = {state.experiments.get(config.name).rubric, *state.scorings.requested(config.name)} - {config.rubric}
    if any(state.training.frontier(config.name, rubric) < config.steps for rubric in others):
        return
    try:
        released = trainer.release(config.name)
    except Exception as err:  # whatever Ray raises for a cluster it cannot reach: not this step's failure
        context.log.warning(f"could not end the trainer actor of {config.name} ({err}); it stays idle until stop")
        return
    if released:
        context.log.info(f"{config.name}'s chains are all trained: ended its trainer actor, freeing its memory")


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
        deadline = Waiting(timeout_s=BACKFILL_WAIT_S, interval_s=BACKFILL_POLL_S).deadline()
        while waiting := _unsettled(state, config, earlier):
            if deadline.expired():
                raise dg.Failure(
                    f"step {earlier} of {config.name}: {waiting} not judged within {BACKFILL_WAIT_S:.0f} s"
                )
            context.log.info(f"step {step} waits for step {earlier}'s rewards: {', '.join(waiting)}")
            deadline.sleep()  # other runs of the backfill are judging them
        context.log.info(f"training step {earlier} of {config.name} first: step {step} starts from it")
        _train_step(context, state, trainer, config, earlier)


@dg.asset(
    partitions_def=STEP,
    deps=[dg.AssetDep("rewards", partition_mapping=dg.MultiToSingleDimensionPartitionMapping("step"))],
    code_version="weights-v1",
    group_name="rl",
    pool=pools.TRAIN,
    backfill_policy=dg.BackfillPolicy.single_run(),
    check_specs=WEIGHTS_CHECKS,
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
    findings = []
    for experiment, steps in sorted(chains.items()):
        config = state.experiments.get(experiment)
        scored = config.scored_with(run_rubric(context.run.tags, state, config).name)
        if len(steps) > 1:
            context.log.info(f"retraining {experiment} under {scored.rubric} in step order: {sorted(steps)}")
        for step in sorted(steps):
            if BACKFILL_TAG in context.run.tags:
                _train_earlier_steps(context, state, trainer, scored, step)
            trained.append(_train_step(context, state, trainer, scored, step))
            findings.append(step_findings(state, scored, step))
    if len(trained) == 1:
        metadata = trained[0]
        return dg.MaterializeResult(
            metadata=metadata,
            data_version=dg.DataVersion(str(metadata["policy_hash"])),
            check_results=check_results("weights", findings[0]),
        )
    return dg.MaterializeResult(
        metadata={"steps": dg.MetadataValue.json(trained)}, check_results=chain_check_results("weights", findings)
    )
