"""Harbor's ``[[steps]]``: the rules of a multi-step task, as Harbor's ``MultiStepTrial`` defines them.

A multi-step task gives its agent one instruction at a time in one environment. Each step (in order):
the previous step's tests and verifier logs are removed; ``steps/<name>/workdir/`` is copied into the
working directory and its ``setup.sh`` run there; the step's ``[steps.healthcheck]`` must pass; the
agent works on ``steps/<name>/instruction.md``; then the step's verifier runs with the task's ``tests/``
and the step's own ``tests/`` (the step's files win), the step's ``[steps.verifier] env`` over the
task's. A step that fails before its verifier, or whose rewards miss its ``min_reward``, ends the trial.
The trial's rewards are the per-key means over the steps that were verified (a key a step lacks counts
0), or the last step's with ``multi_step_reward_strategy = "final"``.

This module holds the rules and the loop (:func:`run_steps`); what acts in a step (the chat agent, or
``tasks check``'s oracle running the step's ``solution/solve.sh``) and the environment the steps run in
(:class:`StepEnvironment`, a container: :mod:`rl_assets.containers.sessions`) are the caller's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from rl_assets.domain.models import StepOutcome, VerifierOutcome
from rl_assets.tasks.config import StepConfig, VerifierConfig
from rl_assets.tasks.task import Task
from rl_assets.tasks.verifier import REWARD_KEY, RewardKeyMissing, VerifierError


class StepSetupError(VerifierError):
    """A step's ``setup.sh`` or healthcheck failed: the step ends before anything acts in it."""


@runtime_checkable
class StepEnvironment(Protocol):
    """Where a multi-step task's steps run: one environment for all of them."""

    def prepare_step(self, step: StepConfig) -> None:
        """The previous step's tests and verifier logs removed, the step's workdir copied in, its setup.sh run, its
        healthcheck passed; :class:`StepSetupError` otherwise."""
        ...

    def verify_step(self, answer: str, deadline: float | None, step: StepConfig) -> VerifierOutcome:
        """The step's verifier (:func:`tests_dirs`, :func:`verifier_settings`) after the clean slate."""
        ...


Act = Callable[[StepConfig, str, float], str]
"""Works on one step: ``(step, its instruction, seconds it may take)`` -> the final answer."""


def step_dir(task: Task, step: StepConfig) -> Path:
    return task.path / "steps" / step.name


def step_instruction(task: Task, step: StepConfig) -> str:
    """``steps/<name>/instruction.md``, verbatim (:func:`rl_assets.tasks.task.load_task` checked it is there)."""
    return (step_dir(task, step) / "instruction.md").read_text(encoding="utf-8")


def tests_dirs(task: Task, step: StepConfig | None) -> list[Path]:
    """What the verifier finds in ``/tests``: the task's ``tests/``, then the step's (its files win)."""
    dirs = [task.path / "tests"]
    if step is not None:
        dirs.append(step_dir(task, step) / "tests")
    return [d for d in dirs if d.is_dir()]


def agent_timeout_s(task: Task, step: StepConfig) -> float | None:
    """The step's ``[steps.agent] timeout_sec``, else the task's ``[agent]`` one (None: no timeout of its own)."""
    if step.agent.timeout_sec is not None:
        return step.agent.timeout_sec
    return task.config.agent.timeout_sec


def verifier_settings(task: Task, step: StepConfig | None) -> tuple[float, dict[str, str], str | None]:
    """(timeout, environment, user) of a step's verifier: each the step's where it sets one, else the task's."""
    base = task.config.verifier
    if step is None:
        return base.timeout_sec, dict(base.env), base.user
    own: VerifierConfig = step.verifier
    timeout = own.timeout_sec if "timeout_sec" in own.model_fields_set else base.timeout_sec
    user = own.user if own.user is not None else base.user
    return timeout, {**base.env, **own.env}, None if user is None else str(user)


def min_reward_failure(step: StepConfig, rewards: dict[str, float] | None) -> str | None:
    """Why the trial stops after ``step`` for its rewards (a float gates ``reward``; a table each key), or None.

    A missing key, or no rewards at all (the verifier failed), counts as minus infinity, as in Harbor.
    """
    if step.min_reward is None:
        return None
    thresholds = step.min_reward if isinstance(step.min_reward, dict) else {REWARD_KEY: step.min_reward}
    for key, threshold in thresholds.items():
        actual = (rewards or {}).get(key, float("-inf"))
        if actual < threshold:
            return f"step {step.name!r}: {key} = {actual:g} is below its min_reward {threshold:g}"
    return None


def trial_rewards(task: Task, outcomes: Sequence[StepOutcome]) -> dict[str, float] | None:
    """The trial's rewards from its steps' (None: no step was verified)."""
    verified = [o.rewards for o in outcomes if o.verified]
    if not verified:
        return None
    if task.config.multi_step_reward_strategy == "final":
        return dict(outcomes[-1].rewards) if outcomes[-1].verified else None
    keys = sorted({key for rewards in verified for key in rewards})
    return {key: sum(r.get(key, 0.0) for r in verified) / len(verified) for key in keys}


def run_steps(task: Task, environment: StepEnvironment, act: Act, deadline: float, default_s: float) -> VerifierOutcome:
    """Every step in turn, until one fails or misses its ``min_reward``: the trial's outcome, its ``steps`` one record
    per step reached. ``deadline`` (``time.monotonic()``) bounds the whole; a step without a timeout of its own
    gets ``default_s``. Raises the last step's :class:`~rl_assets.tasks.verifier.VerifierError` when no step was
    verified."""
    assert task.config.steps
    outcomes: list[StepOutcome] = []
    last_error: VerifierError | None = None
    for step in task.config.steps:
        try:
            environment.prepare_step(step)
            seconds = min(agent_timeout_s(task, step) or default_s, deadline - time.monotonic())
            answer = act(step, step_instruction(task, step), max(0.0, seconds))
            verified = environment.verify_step(answer, deadline, step)
        except VerifierError as err:
            outcomes.append(StepOutcome(name=step.name, error=f"{type(err).__name__}: {err}", output=err.output))
            last_error = err
            break
        outcomes.append(StepOutcome(name=step.name, rewards=verified.rewards, output=verified.output))
        if min_reward_failure(step, verified.rewards) is not None:
            break
    rewards = trial_rewards(task, outcomes)
    if rewards is None:
        raise last_error or VerifierError("no step of the task was verified")
    output = "\n".join(f"== step {o.name}: {o.summary()} ==\n{o.output}" for o in outcomes)
    if REWARD_KEY not in rewards:
        raise RewardKeyMissing(f"the steps' rewards have no {REWARD_KEY!r} key: {sorted(rewards)}", output)
    return VerifierOutcome(reward=rewards[REWARD_KEY], rewards=rewards, output=output, steps=tuple(outcomes))
