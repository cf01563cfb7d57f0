"""The ``tasks`` workload: Harbor tasks, the chat agent over the experiment's policy server, the verifier.

A trial opens the task's sandbox on a private fork of its world, lets the chat
agent work through it until the model is done (or out of turns or time), then
runs the task's verifier in the same fork; its trajectory is the transcript and
the verifier's outcome. Every answered model call is handed to the attempt's
cost-ledger hook as it arrives. The policy is whatever the server serves
(``--trainer none``: each step an evaluation pass), so the trainer keeps it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rl_assets.domain.agent import Rollout
from rl_assets.domain.experiment import LOCAL_POLICY_MODEL, ExperimentConfig
from rl_assets.domain.hashing import content_hash
from rl_assets.domain.judge_rubric import JudgeRubric
from rl_assets.domain.models import Policy, Trajectory, TrialSpec, Verdict, VerifierOutcome
from rl_assets.domain.rubrics import AnyRubric, kind_problem
from rl_assets.domain.transcripts import Transcript, Usage
from rl_assets.tasks.config import StepConfig
from rl_assets.tasks.snapshot import snapshot_task
from rl_assets.tasks.steps import StepEnvironment, run_steps
from rl_assets.tasks.task import Task
from rl_assets.workloads.harbor.agent import AgentLimits, ChatAgent, final_answer
from rl_assets.workloads.harbor.client import JUDGE_KEY_ENV, ChatClient, ChatEndpoint
from rl_assets.workloads.harbor.judge import LLMJudge
from rl_assets.workloads.seams import Attempt, Environment, TaskSession


@dataclass(frozen=True)
class TaskAgent:
    """The chat agent on a Harbor task: its loop in the worker, its commands in the task's sandbox.

    The limits that vary per trial are in the trajectory's identity already
    (``max_turns`` in the spec, the task's ``[agent] timeout_sec`` in its world's
    id), so the version is the agent's own: prompt, tools and output caps. The
    agent's deadline is the task's ``[agent] timeout_sec``, capped by the
    operator's ``--trial-timeout`` (the bound of any attempt of any workload).
    """

    @property
    def version(self) -> str:
        return "task-" + ChatAgent().version

    def rollout(self, environment: Environment, spec: TrialSpec, policy: Policy, attempt: Attempt) -> Rollout:
        config = attempt.config
        deadline = time.monotonic() + attempt.timeout_s  # the trial's, the verifier's time included
        task = environment.worlds.task(spec.world_id)
        task_timeout_s = task.config.agent.timeout_sec or attempt.timeout_s
        limits = AgentLimits(max_turns=spec.max_turns, timeout_s=min(task_timeout_s, attempt.timeout_s))
        endpoint, key, seed = _policy_endpoint(config, spec, policy, attempt)
        agent = ChatAgent(limits, config.agent_protocol or "tools")
        with (
            ChatClient(
                endpoint, on_answer=lambda a: attempt.on_model_call(endpoint.model, a.turn.usage), api_key=key
            ) as client,
            environment.sandbox.task_session(attempt.fork(spec), task) as session,
        ):
            if task.config.steps:
                transcript, outcome = _run_steps(task, agent, client, session, seed, deadline)
            else:
                transcript = agent.run(task.instruction, client, session, seed=seed)
                outcome = session.verify(final_answer(transcript), deadline)
        return Rollout(turns=[], answer="", files_written=[], transcript=transcript, verifier=outcome)


def _run_steps(
    task: Task, agent: ChatAgent, client: ChatClient, session: TaskSession, seed: int | None, deadline: float
) -> tuple[Transcript, VerifierOutcome]:
    """A multi-step task: each step's instruction in turn, as the next message of one dialogue (its own turns
    and time), each step verified (:func:`rl_assets.tasks.steps.run_steps`)."""
    if not isinstance(session, StepEnvironment):
        raise TypeError(f"{task.name} has [[steps]], and its sandbox cannot run steps (only a container can)")
    dialogue: list[Transcript] = []

    def act(step: StepConfig, instruction: str, seconds: float) -> str:
        before = dialogue[-1] if dialogue else None
        step_agent = dataclasses.replace(agent, limits=dataclasses.replace(agent.limits, timeout_s=seconds))
        dialogue.append(step_agent.run(instruction, client, session, seed=seed, before=before))
        return final_answer(dialogue[-1])

    outcome = run_steps(task, session, act, deadline, agent.limits.timeout_s)
    return dialogue[-1], outcome


def _policy_endpoint(
    config: ExperimentConfig, spec: TrialSpec, policy: Policy, attempt: Attempt
) -> tuple[ChatEndpoint, str | None, int | None]:
    """The server a trial's agent asks, the key it presents (None: the endpoint's variable), its sampling seed.

    ``--policy local``: the home's policy server, asked for the trial's parent policy by version (it refuses
    a stale one), sampling seeded by the trial id, so every sample of a task explores on its own and an
    attempt asked again gets the same answers. Otherwise the experiment's ``--policy-url``.
    """
    if config.policy == "local":
        if attempt.policy_server is None:
            raise ValueError(f"experiment {config.name} is served by the home's policy server; none was given")
        address = attempt.policy_server()
        endpoint = ChatEndpoint(
            base_url=address.base_url,
            model=LOCAL_POLICY_MODEL,
            policy={"experiment": config.name, "version": policy.version},
            **policy_sampling(config),
        )
        return endpoint, address.api_key, int(content_hash({"trial": spec.trial_id})[:8], 16)
    if config.policy_url is None or config.policy_model is None:
        raise ValueError(f"experiment {config.name} names no policy server")
    token_ids = config.policy_token_ids != "off"
    endpoint = ChatEndpoint(
        base_url=config.policy_url,
        model=config.policy_model,
        logprobs=token_ids,
        return_token_ids=token_ids,
        **policy_sampling(config),
    )
    return endpoint, _named_key(config.policy_key_name, attempt.api_key), None


def policy_sampling(config: ExperimentConfig) -> dict[str, object]:
    """The agent's request settings the experiment sets (``--policy-max-tokens`` ...), as endpoint fields."""
    settings = {
        "max_tokens": config.policy_max_tokens,
        "temperature": config.policy_temperature,
        "top_p": config.policy_top_p,
        "tool_choice": config.policy_tool_choice,
    }
    return {k: v for k, v in settings.items() if v is not None}


def _named_key(name: str | None, read: Callable[[str], str] | None) -> str | None:
    """The named key's value, read now; None (the endpoint's variable, a Kubernetes Secret's) if none is named
    or keys are not the home's here."""
    return None if name is None or read is None else read(name)


@dataclass(frozen=True)
class TaskJudge:
    """The LLM judge of a task trial: one chat completion under a judge rubric, billed to the cost ledger.

    Its ``judge_id`` is the model's (the rubric is keyed beside it in every
    verdict key), so a verdict is reused exactly when model, rubric and trajectory match.
    """

    endpoint: ChatEndpoint
    structured: bool
    """Ask for the verdict by schema (``--judge-structured-output auto``), by the prompt alone where refused."""
    task_of: Callable[[str], Task]
    """A task world's task (its instruction is what the judge is told the agent was asked)."""
    on_model_call: Callable[[str, Usage], None]
    api_key: Callable[[], str | None] = lambda: None
    """The key presented, read at each call (None: the endpoint's variable)."""

    @property
    def judge_id(self) -> str:
        """The model, and its sampling settings where the experiment sets them (a verdict sampled otherwise is
        another verdict); not the server's URL or the output format, which change how it is asked, not who judges."""
        e = self.endpoint
        sampling = {k: v for k, v in (("max_tokens", e.max_tokens), ("temperature", e.temperature)) if v is not None}
        return "llm-" + content_hash({"model": e.model, **({"sampling": sampling} if sampling else {})})

    def verdict(self, trajectory: Trajectory, rubric: AnyRubric) -> Verdict:
        if not isinstance(rubric, JudgeRubric):
            raise TypeError(kind_problem(rubric, llm_judge=True))
        if trajectory.transcript is None or trajectory.verifier is None:
            raise ValueError(f"{trajectory.trial_id} is not a task trial; the LLM judge has nothing to read")
        task = self.task_of(trajectory.world_id)
        on_answer = lambda a: self.on_model_call(self.endpoint.model, a.turn.usage)  # noqa: E731
        with ChatClient(self.endpoint, on_answer=on_answer, api_key=self.api_key()) as client:
            judged = LLMJudge(client, rubric, self.structured).score(
                task.instruction, trajectory.transcript, trajectory.verifier.reward, trajectory.verifier.output
            )
        return Verdict(
            trajectory_hash=trajectory.content_hash,
            rubric_name=rubric.name,
            rubric_hash=rubric.content_hash,
            score=judged.score,
            reason=judged.reason,
            usage=judged.usage,
        )


def task_judge(
    config: ExperimentConfig,
    tasks_root: Path,
    on_model_call: Callable[[str, Usage], None],
    api_key: Callable[[str], str] | None = None,
) -> TaskJudge:
    """The LLM judge an experiment names (``--judge-url``, ``--judge-model``): its key the home's one named by
    ``--judge-key-name``, read through ``api_key`` at each call, else the environment's (a Kubernetes Secret)."""
    if config.judge_url is None or config.judge_model is None:
        raise ValueError(f"experiment {config.name} names no judge server")
    endpoint = ChatEndpoint(
        base_url=config.judge_url,
        model=config.judge_model,
        api_key_env=JUDGE_KEY_ENV,
        logprobs=False,  # a verdict is read, not trained on; reasoning models on hosted APIs refuse logprobs
        return_token_ids=False,
        max_tokens=config.judge_max_tokens,
        temperature=config.judge_temperature,
    )
    return TaskJudge(
        endpoint,
        config.judge_structured_output != "off",
        lambda world_id: snapshot_task(tasks_root, world_id),
        on_model_call,
        lambda: _named_key(config.judge_key_name, api_key),
    )


@dataclass(frozen=True)
class VerifierOnlyJudge:
    """``--judge none``: never called; the rewards asset takes the verifier's reward as the reward."""

    judge_id: str = "none"

    def verdict(self, trajectory: Trajectory, rubric: AnyRubric) -> Verdict:
        raise RuntimeError("a task experiment with --judge none is rewarded by its verifier alone, never judged")
