"""The learning table and counts of an experiment, read from durable records only.

Reading never changes the home: a damaged record is reported (a
:class:`~rl_assets.trainer.batches.DamagedRecordError`), not quarantined; ``train`` repairs it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy, Reward, StepResult, Trajectory
from rl_assets.domain.task_totals import summed, task_of
from rl_assets.domain.transcript_markdown import transcript_markdown
from rl_assets.domain.transcripts import Usage
from rl_assets.home.layout import Home
from rl_assets.stores.home_stores import Stores
from rl_assets.stores.model_calls import ModelUsage
from rl_assets.stores.training import AppliedStep, StepSummary
from rl_assets.trainer.batches import recorded_batch
from rl_assets.workloads.harbor.pricing import PriceTable
from rl_assets.workloads.registry import workload_of

PRIOR_DECIMALS = 6
"""Priors are sums of rounded rewards; printing them to 6 places hides float noise only."""


def step_summaries(stores: Stores, config: ExperimentConfig) -> list[tuple[AppliedStep, StepSummary]]:
    """Each trained step with the summary written when it trained (a row a step, whatever its size); a step
    trained before summaries (or, for tasks, before their per-task sums) existed is summed from its rewards."""
    summaries = stores.training.summaries(config.name, config.rubric)
    found = []
    for applied in stores.training.steps(config.name, config.rubric):
        summary = summaries.get(applied.step)
        if summary is None or summary.trials_verified is None or (config.tasks and summary.task_totals is None):
            batch, _ = recorded_batch(stores, config, applied.step)
            summary = StepSummary.of_batch(config, applied.step, batch)
        found.append((applied, summary))
    return found


def step_results(stores: Stores, config: ExperimentConfig) -> list[StepResult]:
    """Each trained step's line of the learning table, from its summary."""
    return [
        StepResult(
            step=applied.step,
            trials_planned=summary.trials_planned,
            trials_ok=summary.trials_ok,
            mean_reward=summary.mean_reward,
            mean_turns=summary.mean_turns,
            weights_version=applied.version,
            policy_hash=applied.policy_hash,
            actor_pid=applied.actor_pid,
        )
        for applied, summary in step_summaries(stores, config)
    ]


def task_means(stores: Stores, config: ExperimentConfig) -> list[dict[str, Any]]:
    """A task experiment's means per task over its trained steps, from the steps' summaries."""
    totals = summed([summary.task_totals or {} for _, summary in step_summaries(stores, config)])
    return [
        {
            "task": task,
            "trials": t.trials,
            "verifier_reward": round(t.verifier_sum / t.trials, 3),
            "judge_score": round(t.judge_sum / t.judged, 3) if t.judged else None,
            "reward": round(t.reward_sum / t.trials, 3),
            "turns": round(t.turns_sum / t.trials, 2),
        }
        for task, t in totals.items()
        if t.trials
    ]


def final_policy(stores: Stores, config: ExperimentConfig) -> Policy:
    steps = stores.training.steps(config.name, config.rubric)
    if not steps:
        return workload_of(config).trainer.initial(config)
    last = steps[-1]
    policy = stores.checkpoints.load(config.name, config.rubric, last.step, expected_hash=last.policy_hash)
    assert policy is not None, f"checkpoint of step {last.step} is missing"
    return policy


def _steps(trajectory: Trajectory | None) -> dict[str, Any]:
    """A multi-step task's steps (each one's rewards, or why it has none); nothing for a one-step task."""
    steps = trajectory.verifier.steps if trajectory is not None and trajectory.verifier is not None else ()
    return {"steps": [o.model_dump(mode="json", exclude={"output"}) for o in steps]} if steps else {}


def task_trials(stores: Stores, config: ExperimentConfig) -> list[dict[str, Any]]:
    """A task experiment's trials of its trained steps, in canonical order: the rewards and what they cost, and
    each trial that failed for good with its failure's kind (``generate``, ``judge``, ``check``, ``run``) and
    first line."""
    rows = []
    for applied in stores.training.steps(config.name, config.rubric):
        batch, _ = recorded_batch(stores, config, applied.step)
        step_rows = [_trial_row(stores, config, applied.step, reward) for reward in batch]
        for f in failures(stores, config, [applied.step]):
            where = {"trial_id": f["trial_id"], "step": applied.step, "task": task_of(f["trial_id"])}
            step_rows.append({**where, "failed": f["kind"], "error": f["error"]})
        rows += sorted(step_rows, key=lambda r: r["trial_id"])
    return rows


def first_line(text: str) -> str:
    """A failure's first line, as a table shows it."""
    return (text.strip().splitlines() or [""])[0]


def _trial_row(stores: Stores, config: ExperimentConfig, step: int, reward: Reward) -> dict[str, Any]:
    slot = reward.trial_id.split("-", 1)[1]
    trajectory = stores.trials.trajectory(config.name, step, slot)
    usage = trajectory.transcript.usage if trajectory is not None and trajectory.transcript else None
    return {
        "trial_id": reward.trial_id,
        "step": step,
        "task": task_of(reward.trial_id),
        "verifier_reward": reward.verifier_reward,
        "judge_score": reward.judge_score,
        "reward": reward.reward,
        "turns": reward.turns,
        "policy_prompt_tokens": usage.prompt_tokens if usage else 0,
        "policy_completion_tokens": usage.completion_tokens if usage else 0,
        "judge_prompt_tokens": reward.judge_usage.prompt_tokens if reward.judge_usage else 0,
        "judge_completion_tokens": reward.judge_usage.completion_tokens if reward.judge_usage else 0,
        **({"unjudged": reward.unjudged} if reward.unjudged is not None else {}),
        **_steps(trajectory),
    }


class UnknownTrialError(ValueError):
    """A trial id that names no trial of the experiment."""


def trial_view(stores: Stores, config: ExperimentConfig, trial_id: str) -> str:
    """One trial as ``rl-assets show`` prints it: its outcome (reward, or why it failed) and its transcript."""
    step_text, _, slot = trial_id.partition("-")
    step = int(step_text[1:]) if step_text[:1] == "s" and step_text[1:].isdigit() else -1
    if not 0 <= step < config.steps or slot not in config.trial_slots():
        raise UnknownTrialError(
            f"no trial {trial_id!r} in experiment {config.name} (its trials are s<step>-<slot>, e.g. "
            f"s0-{config.trial_slots()[0]})"
        )
    lines = [f"trial {trial_id} of experiment {config.name}"]
    failure = stores.attempts.failed_trials(config.name, [step]).get(trial_id)
    if failure is not None:
        lines.append(f"failed for good: {failure}")
    reward = stores.trials.reward(config.name, config.rubric, step, slot)
    if reward is not None:
        judged = "" if reward.judge_score is None else f", judge {reward.judge_score:g}"
        verifier = "" if reward.verifier_reward is None else f" (verifier {reward.verifier_reward:g}{judged})"
        unjudged = "" if reward.unjudged is None else f", unjudged: {reward.unjudged}"
        lines.append(f"reward {reward.reward:g} under rubric {config.rubric}{verifier}{unjudged}")
    trajectory = stores.trials.trajectory(config.name, step, slot)
    lines += ["", transcript_markdown(trajectory) if trajectory is not None else "(no trajectory recorded)"]
    return "\n".join(lines)


def failures(stores: Stores, config: ExperimentConfig, steps: list[int] | None = None) -> list[dict[str, str]]:
    """Every trial that failed for good (of ``steps`` only, if given), in canonical order: its failure's kind and
    first line."""
    failed = stores.attempts.failed_trials(config.name, steps)
    rows = []
    for trial_id in sorted(failed):
        kind, _, error = failed[trial_id].partition(": ")
        rows.append({"trial_id": trial_id, "kind": kind, "error": first_line(error)})
    return rows


def failed_steps(stores: Stores, config: ExperimentConfig) -> dict[int, Counter[str]]:
    """Each trained step every trial of which failed for good, and why, counted by kind and first line: what
    ``train`` exits non-zero for. (A step ``mask-group`` emptied of trials that did not all fail is not one.)"""
    failed = {}
    for r in step_results(stores, config):
        reasons = stores.attempts.failed_trials(config.name, [r.step]).values() if not r.trials_ok else ()
        if r.trials_planned and len(reasons) == r.trials_planned:
            failed[r.step] = Counter(first_line(reason) for reason in reasons)
    return failed


def prices(home: Path) -> PriceTable:
    """The home's price table (``prices.toml``: see :mod:`rl_assets.workloads.harbor.pricing`), empty if none."""
    path = Home(home).prices
    return PriceTable.load(path) if path.exists() else PriceTable()


def cost_of(usage: list[ModelUsage], table: PriceTable) -> dict[str, Any]:
    """Tokens per role and their price in USD; models without a price are named, never counted as free silently."""
    cost: dict[str, Any] = {f"{r}_{k}": 0 for r in ("policy", "judge") for k in ("prompt_tokens", "completion_tokens")}
    usd, unpriced = 0.0, []
    for row in usage:
        cost[f"{row.role}_prompt_tokens"] += row.prompt_tokens
        cost[f"{row.role}_completion_tokens"] += row.completion_tokens
        priced = table.cost(row.model, Usage(prompt_tokens=row.prompt_tokens, completion_tokens=row.completion_tokens))
        usd += priced.usd
        if not priced.priced:
            unpriced.append(row.model)
    return {**cost, "usd": round(usd, 6), "unpriced_models": sorted(set(unpriced))}


def _weights(stores: Stores, policy: Policy) -> dict[str, Any]:
    """The final weights: the bandit's priors, or a language model's checkpoint directory, hash and size."""
    if policy.lm is None:
        return {w: [round(x, PRIOR_DECIMALS) for x in p] for w, p in sorted(policy.priors.items())}
    checkpoint = policy.lm.checkpoint
    return {
        "checkpoint": None if checkpoint is None else str(stores.artifacts.root / "models" / checkpoint),
        "policy_hash": policy.content_hash,
        "parameters": policy.lm.parameters,
    }


def experiment_result(stores: Stores, config: ExperimentConfig, per_trial: bool = False) -> dict[str, Any]:
    """The JSON object of ``rl-assets train --json`` and ``status --json``: read from the steps' summaries and the
    ledgers' totals; a task experiment adds its means per task and the bill, and with ``per_trial`` (``train``'s)
    each trial, which reads every reward and trajectory."""
    policy = final_policy(stores, config)
    result = {
        "experiment": config.name,
        "rubric": config.rubric,
        "steps": [
            {
                "step": r.step,
                "trials_planned": r.trials_planned,
                "trials_ok": r.trials_ok,
                "mean_reward": r.mean_reward,
                "mean_turns": r.mean_turns,
                "weights_version": r.weights_version,
                "actor_pid": r.actor_pid,
            }
            for r in step_results(stores, config)
        ],
        "weights": _weights(stores, policy),
        "counts": stores.attempts.counts(config.name),
        "failures": failures(stores, config),
    }
    if config.tasks is not None:
        result["tasks"] = task_means(stores, config)
        if per_trial:
            result["trials"] = task_trials(stores, config)
        result["counts"]["policy_calls"] = stores.model_calls.calls(config.name, "policy")
        result["cost"] = cost_of(stores.model_calls.usage(config.name), prices(stores.home))
    return result


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"experiment {result['experiment']} (rubric {result['rubric']})",
        f"{'step':>4}  {'trials':>9}  {'mean_reward':>11}  {'mean_turns':>10}  {'version':>7}  {'actor_pid':>9}",
    ]
    for s in result["steps"]:
        reward = "-" if s["mean_reward"] is None else f"{s['mean_reward']:.3f}"
        turns = "-" if s["mean_turns"] is None else f"{s['mean_turns']:.2f}"
        lines.append(
            f"{s['step']:>4}  {s['trials_ok']:>4}/{s['trials_planned']:<4}  {reward:>11}  {turns:>10}  "
            f"{s['weights_version']:>7}  {s['actor_pid']:>9}"
        )
    lines.append("counts: " + ", ".join(f"{k}={v}" for k, v in result["counts"].items()))
    if "tasks" in result:
        lines += _task_lines(result["tasks"], result["cost"])
    return "\n".join(lines + _failure_lines(result["failures"]))


FAILURES_SHOWN = 20


def _failure_lines(failures: list[dict[str, str]]) -> list[str]:
    """Each trial that failed for good, with its failure's kind and first line (the first few, then a count)."""
    lines = [f"failed {f['trial_id']}: {f['kind']}: {f['error']}" for f in failures[:FAILURES_SHOWN]]
    if len(failures) > FAILURES_SHOWN:
        lines.append(f"failed ... and {len(failures) - FAILURES_SHOWN} more (--json lists them all)")
    return lines


def _task_lines(tasks: list[dict[str, Any]], cost: dict[str, Any]) -> list[str]:
    """A task experiment's means per task over its trained trials, and its bill."""
    lines = [f"{'task':<28} {'trials':>6}  {'verifier':>8}  {'judge':>6}  {'reward':>7}  {'turns':>5}"]
    for t in tasks:
        judge = "-" if t["judge_score"] is None else f"{t['judge_score']:.3f}"
        lines.append(
            f"{t['task']:<28} {t['trials']:>6}  {t['verifier_reward']:>8.3f}  {judge:>6}  "
            f"{t['reward']:>7.3f}  {t['turns']:>5.2f}"
        )
    unpriced = f" (no price for {', '.join(cost['unpriced_models'])})" if cost["unpriced_models"] else ""
    lines.append(
        f"cost: policy {cost['policy_prompt_tokens']} + {cost['policy_completion_tokens']} tokens, judge "
        f"{cost['judge_prompt_tokens']} + {cost['judge_completion_tokens']} tokens, ${cost['usd']:.4f}{unpriced}"
    )
    return lines
