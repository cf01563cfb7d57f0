"""The reference workload's implementations of the seams: today's bandit, as specified.

Each is a thin adapter over :mod:`rl_assets.domain` (which stays free of any
orchestration), so the numbers of docs/reference-workload.md are the domain's.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_assets.domain.agent import Rollout
from rl_assets.domain.bandit import apply_step
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy, Reward, Trajectory, TrialSpec, Verdict
from rl_assets.domain.rubrics import AnyRubric
from rl_assets.domain.scoring import simulated_judge
from rl_assets.sandbox.protocol import ForkLayout, SandboxRequest
from rl_assets.workloads.seams import Attempt, Environment, TrainingWorkspace


@dataclass(frozen=True)
class ReferenceAgent:
    """The bandit agent: the sandbox runs :mod:`rl_assets.sandbox.reference_agent` with its world's prior."""

    version: str = "reference-agent-v1"

    def request(self, spec: TrialSpec, policy: Policy, fork: ForkLayout, tool_latency_s: float) -> SandboxRequest:
        """What the sandbox is handed for one attempt of ``spec`` under ``policy`` on ``fork``."""
        return SandboxRequest(spec=spec, prior=policy.priors[spec.world_id], fork=fork, tool_latency_s=tool_latency_s)

    def rollout(self, environment: Environment, spec: TrialSpec, policy: Policy, attempt: Attempt) -> Rollout:
        return environment.sandbox.rollout(
            attempt.fork(spec),
            lambda fork: self.request(spec, policy, fork, attempt.tool_latency_s),
            timeout_s=attempt.timeout_s,
        )


@dataclass(frozen=True)
class SimulatedJudge:
    """The seeded stand-in for an LLM judge (:func:`rl_assets.domain.scoring.simulated_judge`)."""

    judge_id: str = "simulated-v1"

    def verdict(self, trajectory: Trajectory, rubric: AnyRubric) -> Verdict:
        return simulated_judge(trajectory, rubric)


@dataclass(frozen=True)
class BanditTrainer:
    """The bandit update (:func:`rl_assets.domain.bandit.apply_step`); a checkpoint is the policy's JSON."""

    def initial(self, config: ExperimentConfig) -> Policy:
        return Policy.initial(config.world_ids)

    def update(self, parent: Policy, batch: list[Reward], lr: float, workspace: TrainingWorkspace) -> Policy:
        return apply_step(parent, batch, lr)

    def checkpoint(self, policy: Policy) -> str:
        return policy.model_dump_json()

    def restore(self, checkpoint: str) -> Policy:
        return Policy.model_validate_json(checkpoint)
