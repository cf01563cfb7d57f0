"""``--trainer none``: the policy stays what it is, so each step is an evaluation pass.

An agent benchmark run this way is still durable, resumable and re-scorable:
every step goes through the training ledger like a real update (applied exactly
once, checkpointed), only the update changes nothing but the version. The
policy itself lives outside (the model server the agent calls); its record here
is the version the step's rollouts were generated under.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy, Reward
from rl_assets.workloads.seams import TrainingWorkspace


@dataclass(frozen=True)
class FixedPolicyTrainer:
    """A trainer whose update keeps the policy: version ``v + 1``, nothing else changed."""

    def initial(self, config: ExperimentConfig) -> Policy:
        return Policy(version=0, priors={})

    def update(self, parent: Policy, batch: list[Reward], lr: float, workspace: TrainingWorkspace) -> Policy:
        return parent.model_copy(update={"version": parent.version + 1})

    def checkpoint(self, policy: Policy) -> str:
        return policy.model_dump_json()

    def restore(self, checkpoint: str) -> Policy:
        return Policy.model_validate_json(checkpoint)
