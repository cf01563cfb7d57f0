"""``rewards``: the verifier plus the judge, for one trial under one rubric.

Judging is its own step with its own retries: a failure after the judge has
answered (an upload, a crash) is retried without calling the judge again,
because the verdict was recorded first.
"""

from functools import partial

import dagster as dg

from rl_assets.assets import pools
from rl_assets.assets.checks import REWARD_CHECKS, check_results
from rl_assets.assets.partitions import TRIAL, parse_trial_partition
from rl_assets.assets.rubrics import run_rubric
from rl_assets.assets.unit_run import UnitRun
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import MalformedVerdict, Reward, Trajectory, Verdict
from rl_assets.domain.rubrics import AnyRubric, kind_problem
from rl_assets.domain.scoring import reward_of, task_reward
from rl_assets.domain.transcript_markdown import MESSAGE_CHARS, capped
from rl_assets.domain.transcripts import Usage
from rl_assets.home.layout import Home
from rl_assets.home.services.api_keys import home_api_keys
from rl_assets.resources.faults import FaultInjection, InjectedJudgeFault
from rl_assets.resources.judge import JudgeResource
from rl_assets.resources.stores import StoresResource
from rl_assets.stores.artifacts import CorruptArtifactError
from rl_assets.stores.home_stores import Stores
from rl_assets.stores.quarantine import read_or_quarantine
from rl_assets.stores.verdicts import CorruptVerdictError
from rl_assets.views.invariant_records import reward_findings
from rl_assets.workloads.harbor.workload import task_judge
from rl_assets.workloads.registry import workload_of
from rl_assets.workloads.seams import Judge

UNJUDGED_CHARS = 500


@dg.asset(
    partitions_def=TRIAL,
    deps=["trajectories", "rubrics"],
    code_version="reward-v1",
    group_name="rl",
    pool=pools.JUDGE,
    check_specs=REWARD_CHECKS,
    description="One trial's reward: verifier correctness plus the judge's score, under the run's rubric.",
)
def rewards(context: dg.AssetExecutionContext, stores: StoresResource, judge: JudgeResource) -> dg.MaterializeResult:
    return reward_of_trial(UnitRun.of(context), stores.stores, judge)


def reward_of_trial(unit: UnitRun, state: Stores, judge: JudgeResource) -> dg.MaterializeResult:
    """One trial's reward under the run's rubric: what the asset materializes, in whichever run carries it.

    Raises ``dg.RetryRequested`` for another attempt and ``dg.Failure`` when the trial cannot be judged.
    """
    experiment, step, slot = parse_trial_partition(unit.partition_key)
    config = state.experiments.get(experiment)
    runtime = state.experiments.runtime(experiment)
    trial_id = config.trial(step, slot).trial_id
    if trial_id in state.attempts.failed_trials(experiment):
        raise dg.Failure(f"{trial_id} failed for good before it was judged; there is nothing to judge")
    checked = read_or_quarantine(
        state.artifacts,
        state.damage,
        partial(state.trials.trajectory, experiment, step, slot),
        "trajectory",
        "trial",
        unit.partition_key,
    )
    if checked.record is None:
        raise dg.Failure(f"{trial_id}: its {checked.problem}; the driver runs the trial again", allow_retries=False)
    trajectory = checked.record
    rubric = run_rubric(unit.tags, state, config)
    if config.judge == "none":  # a task experiment without a judge: the verifier's reward is the reward
        reward = task_reward(trajectory, rubric.name, None)
        return _recorded(unit, state, config, rubric, step, slot, reward, trajectory)
    problem = kind_problem(rubric, llm_judge=config.judge == "llm")
    if problem is not None:
        raise dg.Failure(f"{trial_id}: {problem}", allow_retries=False)
    attempt = unit.attempt
    chosen = _judge_of(state, config, trial_id)
    key = judge.key(experiment, trajectory, rubric, chosen)
    judged = _judged_before(state, config, rubric.name, step, slot, trajectory, key)
    if judged is not None:  # a run that judged it ended before its materialization: nothing is judged again
        unit.log.info(f"{trial_id} was judged under {rubric.name} by an earlier run; its recorded reward stands")
        return _materialized(
            unit, state, config, rubric, step, slot, trajectory, judged, judge.identity(chosen), "reused"
        )
    cache_hit: bool | None = None
    try:
        verdict, cache_hit = (
            FaultInjection(runtime.faults, attempt)
            .judging(judge)
            .judge(
                state.verdicts,
                trajectory,
                rubric,
                experiment,
                latency_s=runtime.execution.judge_latency_s,
                timeout_s=runtime.execution.judge_timeout_s,
                judge=chosen,
            )
        )
    except Exception as err:
        if isinstance(err, InjectedJudgeFault):  # the verdict was had; the attempt's record says how
            cache_hit = err.cache_hit
        state.attempts.record_judging(experiment, trial_id, attempt, key, cache_hit, "failed")
        retries = _retries(config, state, key, attempt, err)
        if retries is not None:
            unit.log.warning(f"judging {trial_id} attempt {attempt} failed: {err}; retrying")
            raise dg.RetryRequested(max_retries=retries) from err
        failed = f"judging {trial_id} failed on all {attempt + 1} attempts: {err}"
        if config.judge_failure == "verifier-only" and trajectory.verifier is not None:
            unit.log.warning(f"{failed}; its verifier's reward stands, unjudged (--judge-failure verifier-only)")
            reward = task_reward(trajectory, rubric.name, None, unjudged=capped(str(err), UNJUDGED_CHARS))
            return _recorded(unit, state, config, rubric, step, slot, reward, trajectory)
        state.attempts.record_trial_failure(experiment, trial_id, "judge", str(err))
        raise dg.Failure(failed, allow_retries=False) from err
    state.attempts.record_judging(experiment, trial_id, attempt, key, cache_hit, "ok")
    reward = _judged_reward(config, rubric.name, trajectory, verdict)
    state.trials.save_reward(experiment, rubric.name, step, slot, reward)
    return _materialized(
        unit,
        state,
        config,
        rubric,
        step,
        slot,
        trajectory,
        (verdict, reward),
        judge.identity(chosen),
        "hit" if cache_hit else "call",
    )


def _judged_reward(config: ExperimentConfig, rubric_name: str, trajectory: Trajectory, verdict: Verdict) -> Reward:
    return reward_of(trajectory, verdict) if config.judge is None else task_reward(trajectory, rubric_name, verdict)


def _judged_before(
    state: Stores, config: ExperimentConfig, rubric_name: str, step: int, slot: str, trajectory: Trajectory, key: str
) -> tuple[Verdict, Reward] | None:
    """The verdict and reward an earlier run recorded for this trajectory under ``key``, if both are intact and
    agree: that run judged the trial and saved its reward, then ended before its materialization was written (a
    rollout run failed or killed at its end). Judging it again would call nothing (the verdict is recorded) but
    would count another attempt and draw its faults again; as a stored rollout is reused, so is this.
    Anything missing, damaged or different is judged as usual, and so is a verifier-only reward saved after
    the judge failed for good (``--judge-failure verifier-only``): there is no verdict to reuse, and the rerun
    asks the judge again."""
    try:
        saved = state.trials.reward(config.name, rubric_name, step, slot)
        verdict = state.verdicts.get(key) if saved is not None else None
    except (CorruptArtifactError, CorruptVerdictError):
        return None  # judging reads them again through the checks that quarantine or re-call
    if saved is None or verdict is None or saved != _judged_reward(config, rubric_name, trajectory, verdict):
        return None
    return verdict, saved


def _materialized(
    unit: UnitRun,
    state: Stores,
    config: ExperimentConfig,
    rubric: AnyRubric,
    step: int,
    slot: str,
    trajectory: Trajectory,
    judged: tuple[Verdict, Reward],
    judge_identity: str,
    judge_cache: str,
) -> dg.MaterializeResult:
    """The materialization of a judged reward: ``judge_cache`` says whether the judge was called for it
    (``call``), its verdict was recorded already (``hit``), or the reward itself was (``reused``)."""
    verdict, reward = judged
    state.damage.repaired("trial", unit.partition_key)
    return dg.MaterializeResult(
        metadata={
            "trial_id": reward.trial_id,
            "reward": reward.reward,
            "verified": reward.verified,
            "judge_score": verdict.score,
            **({"judge_reason": capped(verdict.reason, MESSAGE_CHARS)} if verdict.reason else {}),
            **_verifier_metadata(trajectory),
            "turns": reward.turns,
            "rubric": rubric.name,
            "rubric_hash": rubric.content_hash,
            "judge": judge_identity,
            "judge_cache": judge_cache,
            "attempt": unit.attempt,
            "trajectory_hash": trajectory.content_hash,
        },
        data_version=dg.DataVersion(reward.content_hash),
        check_results=_checks(state, config, rubric, step, slot),
    )


def _retries(config: ExperimentConfig, state: Stores, key: str, attempt: int, err: Exception) -> int | None:
    """The step's retry budget if judging may be tried again after ``err``, else None.

    Two budgets: a malformed verdict (answered and billed, unusable) is asked again at most
    ``judge_malformed_retries`` times, counted in the verdict ledger; any other failure (no answer, a
    timeout, a crash) at most ``judge_retries`` times, counted as the attempts that were not malformed.
    """
    malformed_retries = config.judge_malformed_retries or 0
    malformed = state.verdicts.malformed_calls(key) if config.judge == "llm" else 0
    if isinstance(err, MalformedVerdict):
        left = malformed <= malformed_retries
    else:
        left = attempt + 1 - malformed <= config.judge_retries
    return config.judge_retries + malformed_retries if left else None


def _verifier_metadata(trajectory: Trajectory) -> dict[str, object]:
    """A task trial's verifier reward and output (capped), beside the judge's verdict."""
    if trajectory.verifier is None:
        return {}
    return {
        "verifier_reward": trajectory.verifier.reward,
        "verifier_output": dg.MetadataValue.md(f"```\n{capped(trajectory.verifier.output, MESSAGE_CHARS)}\n```"),
    }


def _recorded(
    unit: UnitRun,
    state: Stores,
    config: ExperimentConfig,
    rubric: AnyRubric,
    step: int,
    slot: str,
    reward: Reward,
    trajectory: Trajectory,
) -> dg.MaterializeResult:
    """A reward of the verifier alone (no judge, or an unjudged one), recorded like any other."""
    state.trials.save_reward(config.name, reward.rubric_name, step, slot, reward)
    state.damage.repaired("trial", unit.partition_key)
    return dg.MaterializeResult(
        metadata={
            "trial_id": reward.trial_id,
            "reward": reward.reward,
            "verified": reward.verified,
            "judge": "none" if reward.unjudged is None else "unjudged",
            **({"unjudged": reward.unjudged} if reward.unjudged is not None else {}),
            **_verifier_metadata(trajectory),
            "turns": reward.turns,
            "rubric": reward.rubric_name,
            "trajectory_hash": reward.trajectory_hash,
        },
        data_version=dg.DataVersion(reward.content_hash),
        check_results=_checks(state, config, rubric, step, slot),
    )


def _checks(
    state: Stores, config: ExperimentConfig, rubric: AnyRubric, step: int, slot: str
) -> list[dg.AssetCheckResult]:
    """The reward's checks, on the records as stored (re-read, not the values in hand)."""
    return check_results("rewards", reward_findings(state, config.scored_with(rubric.name), rubric, step, slot))


def _judge_of(state: Stores, config: ExperimentConfig, trial_id: str) -> Judge:
    """The experiment's judge: its workload's, or the LLM judge it names (billing each answer to the ledger)."""
    if config.judge != "llm":
        return workload_of(config).judge

    def bill(model: str, usage: Usage) -> None:
        state.model_calls.record(config.name, trial_id, "judge", model, usage.prompt_tokens, usage.completion_tokens)

    return task_judge(config, Home(state.home).tasks, bill, home_api_keys(state.home))
