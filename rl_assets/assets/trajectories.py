"""``trajectories``: one rollout per trial, in its own sandbox on its own fork.

The trajectory's identity is the hash of what determines it (trial spec,
world hash, policy hash, agent version). An identity already in the rollout
cache (the experiment's own, or that of an experiment it was forked from) is
reused, not regenerated: that is what makes a rerun after a crash, and a fork,
cost nothing for unchanged trials.
"""

import dagster as dg

from rl_assets.assets import pools
from rl_assets.assets.partitions import TRIAL, parse_trial_partition
from rl_assets.assets.policy import parent_policy
from rl_assets.assets.unit_run import UnitRun
from rl_assets.containers.images import ImageMissingError
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.hashing import content_hash
from rl_assets.domain.models import Policy, Trajectory, TrialSpec
from rl_assets.domain.runtime import Runtime
from rl_assets.domain.transcript_markdown import transcript_markdown
from rl_assets.home.layout import Home
from rl_assets.home.services.api_keys import home_api_keys
from rl_assets.home.services.policy_server import LocalPolicyServer
from rl_assets.resources.faults import FaultInjection
from rl_assets.resources.stores import StoresResource
from rl_assets.resources.world_store import WorldStoreResource
from rl_assets.stores.artifacts import CorruptArtifactError
from rl_assets.stores.home_stores import Stores
from rl_assets.workloads.registry import workload_of
from rl_assets.workloads.seams import Attempt, Environment
from rl_assets.worlds.local import WorldTamperedError


@dg.asset(
    partitions_def=TRIAL,
    deps=[
        dg.AssetDep("worlds", partition_mapping=dg.AllPartitionMapping()),
        dg.AssetDep("task_images", partition_mapping=dg.AllPartitionMapping()),
    ],
    code_version="trajectory-v1",
    group_name="rl",
    pool=pools.ROLLOUT,
    description="One trial's rollout: the agent's turns in its private fork of the trial's world.",
)
def trajectories(
    context: dg.AssetExecutionContext, stores: StoresResource, world_store: WorldStoreResource
) -> dg.MaterializeResult:
    return trajectory_of(UnitRun.of(context), stores.stores, world_store)


def trajectory_of(unit: UnitRun, state: Stores, world_store: WorldStoreResource) -> dg.MaterializeResult:
    """One trial's rollout, reused or generated: what the asset materializes, in whichever run carries it.

    Raises ``dg.RetryRequested`` for another attempt and ``dg.Failure`` when the trial cannot go on.
    """
    experiment, step, slot = parse_trial_partition(unit.partition_key)
    config = state.experiments.get(experiment)
    runtime = state.experiments.runtime(experiment)
    spec = config.trial(step, slot)
    policy = parent_policy(state, config, step)
    try:
        world_hash = world_store.verified_hash(spec.world_id)
        image = world_store.built_image(spec.world_id)
    except (WorldTamperedError, ImageMissingError) as err:
        state.damage.report("world", spec.world_id, str(err))
        raise dg.Failure(f"{err}; the driver rebuilds it, then reruns {spec.trial_id}", allow_retries=False) from err
    # A container task's world is its files and its image: a rebuilt image (builds are not reproducible) is
    # another environment, so its trials are rolled out again.
    identity = content_hash(
        {
            "spec": spec.model_dump(mode="json"),
            "world": world_hash,
            **({} if image is None else {"image": image.identity}),
            "policy": policy.content_hash,
            "agent": workload_of(config).agent.version,
            **({"rollout": config.rollout_settings} if config.rollout_settings else {}),
        }
    )
    attempt = unit.attempt
    trajectory, source = _reusable(unit, state, experiment, identity)
    fork_kind = "none"
    if trajectory is None:
        trajectory, fork_kind = _generate(
            unit, state, world_store, config, runtime, spec, policy, world_hash, identity, attempt
        )
    elif source != "reused":
        state.trials.cache_rollout(experiment, identity, trajectory)  # the experiment's own copy from now on
    else:
        state.attempts.settle_cut_off(experiment, spec.trial_id, identity)
    state.trials.save_trajectory(experiment, step, slot, trajectory)
    return dg.MaterializeResult(
        metadata={
            "trial_id": spec.trial_id,
            "world_id": spec.world_id,
            "turns": len(trajectory.turns),
            "found_secret": trajectory.found_doc is not None,
            "files_written": ", ".join(trajectory.files_written),
            "policy_version": trajectory.policy_version,
            "policy_hash": trajectory.policy_hash,
            "world_hash": world_hash,
            **({} if image is None else {"image_id": image.identity}),
            "identity": identity,
            "source": source,
            "fork": fork_kind,
            "network_isolated": world_store.network_isolated(),
            "attempt": attempt,
            **_task_metadata(trajectory),
            "transcript": dg.MetadataValue.md(transcript_markdown(trajectory)),
        },
        data_version=dg.DataVersion(trajectory.content_hash),
    )


def _reusable(unit: UnitRun, state: Stores, experiment: str, identity: str) -> tuple[Trajectory | None, str]:
    """A stored rollout with this identity: the experiment's own, else one of the experiments it forks.

    Identity covers everything that determines a rollout, so a match is the
    rollout this trial would generate; a damaged cache entry is quarantined and
    not used.
    """
    for owner in [experiment, *state.experiments.ancestors(experiment)]:
        try:
            trajectory = state.trials.cached_rollout(owner, identity)
        except CorruptArtifactError as err:
            unit.log.warning(f"cached rollout {err.path} is damaged; quarantined, not reused")
            state.artifacts.quarantine(err.path)
            continue
        if trajectory is not None:
            return trajectory, "reused" if owner == experiment else f"reused from {owner}"
    return None, "generated"


def _generate(
    unit: UnitRun,
    state: Stores,
    world_store: WorldStoreResource,
    config: ExperimentConfig,
    runtime: Runtime,
    spec: TrialSpec,
    policy: Policy,
    world_hash: str,
    identity: str,
    attempt: int,
) -> tuple[Trajectory, str]:
    """Run one sandboxed attempt, logging it durably; retry or fail for good on error."""
    execution, agent = runtime.execution, workload_of(config).agent
    fork_kind = world_store.fork_kind()
    attempt_id = state.attempts.start_generation(config.name, spec.trial_id, attempt, identity, fork_kind)
    try:
        attempt_of = Attempt(
            config=config,
            attempt_id=attempt_id,
            timeout_s=execution.trial_timeout_s,
            tool_latency_s=execution.tool_latency_s,
            on_model_call=lambda model, usage: state.model_calls.record(
                config.name,
                spec.trial_id,
                "policy",
                model,
                usage.prompt_tokens,
                usage.completion_tokens,
                attempt_id,
            ),
            policy_server=LocalPolicyServer(Home(state.home)).ensure_running if config.policy == "local" else None,
            api_key=home_api_keys(state.home),
        )
        sandbox = FaultInjection(runtime.faults, attempt).sandbox(world_store)
        rollout = agent.rollout(Environment(worlds=world_store, sandbox=sandbox), spec, policy, attempt_of)
    except Exception as err:  # any sandbox failure is this trial's, never the step's
        state.attempts.finish_generation(attempt_id, "failed", str(err))
        if attempt < config.generate_retries:
            unit.log.warning(f"{spec.trial_id} attempt {attempt} failed: {err}; retrying")
            raise dg.RetryRequested(max_retries=config.generate_retries) from err
        state.attempts.record_trial_failure(config.name, spec.trial_id, "generate", str(err))
        raise dg.Failure(
            f"{spec.trial_id} failed on all {attempt + 1} attempts; its step trains without it. Last error: {err}",
            allow_retries=False,
        ) from err
    trajectory = Trajectory(
        trial_id=spec.trial_id,
        world_id=spec.world_id,
        world_hash=world_hash,
        policy_version=policy.version,
        policy_hash=policy.content_hash,
        turns=rollout.turns,
        answer=rollout.answer,
        files_written=rollout.files_written,
        transcript=rollout.transcript,
        verifier=rollout.verifier,
    )
    # Stored before the attempt is called ok: a kill in between never leaves an ok attempt whose rollout is
    # lost; the rerun reuses the stored rollout and calls the attempt ok then (nothing is paid again).
    state.trials.cache_rollout(config.name, identity, trajectory)
    state.attempts.finish_generation(attempt_id, "ok")
    return trajectory, fork_kind


def _task_metadata(trajectory: Trajectory) -> dict[str, object]:
    """A task trial's model calls, their tokens, how the agent stopped, and what the verifier gave."""
    transcript, verifier = trajectory.transcript, trajectory.verifier
    if transcript is None or verifier is None:
        return {}
    return {
        "policy_model": transcript.model,
        "policy_calls": transcript.policy_calls,
        "prompt_tokens": transcript.usage.prompt_tokens,
        "completion_tokens": transcript.usage.completion_tokens,
        "ended": transcript.ended,
        "token_ids": transcript.has_token_ids,
        "verifier_reward": verifier.reward,
        **({"steps": "; ".join(f"{o.name}: {o.summary()}" for o in verifier.steps)} if verifier.steps else {}),
    }
