"""The ``tasks`` workload: Harbor tasks, the chat agent over the experiment's policy server, the verifier.

A trial opens the task's sandbox on a private fork of its world, lets the chat
agent work through it until the model is done (or out of turns or time), then
runs the task's verifier in the same fork; its trajectory is the transcript and
the verifier's outcome. Every answered model call is handed to the attempt's
cost-ledger hook as it arrives. The policy is whatever the server serves
(``--trainer none``: each step an evaluation pass), so the trainer keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_assets.domain.agent import Rollout
from rl_assets.domain.models import Policy, Rubric, Trajectory, TrialSpec, Verdict
from rl_assets.workloads.harbor.agent import AgentLimits, ChatAgent
from rl_assets.workloads.harbor.client import ChatClient, ChatEndpoint
from rl_assets.workloads.seams import Attempt, Environment


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
        if config.policy_url is None or config.policy_model is None:
            raise ValueError(f"experiment {config.name} names no policy server")
        task = environment.task(spec.world_id)
        task_timeout_s = task.config.agent.timeout_sec or attempt.timeout_s
        limits = AgentLimits(max_turns=spec.max_turns, timeout_s=min(task_timeout_s, attempt.timeout_s))
        endpoint = ChatEndpoint(base_url=config.policy_url, model=config.policy_model)
        with (
            ChatClient(endpoint, on_answer=lambda a: attempt.on_model_call(endpoint.model, a.turn.usage)) as client,
            environment.task_session(spec.world_id, config.name, spec.trial_id, attempt.attempt_id, task) as session,
        ):
            transcript = ChatAgent(limits).run(task.instruction, client, session)
            outcome = session.verify()
        return Rollout(turns=[], answer="", files_written=[], transcript=transcript, verifier=outcome)


@dataclass(frozen=True)
class VerifierOnlyJudge:
    """``--judge none``: never called; the rewards asset takes the verifier's reward as the reward."""

    judge_id: str = "none"

    def verdict(self, trajectory: Trajectory, rubric: Rubric) -> Verdict:
        raise RuntimeError("a task experiment with --judge none is rewarded by its verifier alone, never judged")
