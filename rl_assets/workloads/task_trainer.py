"""The tasks workload's trainer: ``--trainer`` chooses it, and then the policy record says which it is.

``initial`` sees the experiment's config (``none`` or ``grpo``); every later call sees only policies,
and a language model's policy carries ``lm``, so a step is routed by what its parent is. One workload
(``tasks``: the same agent and judge) thus runs either trainer, and an experiment's records name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy, Reward
from rl_assets.workloads.evaluation import FixedPolicyTrainer
from rl_assets.workloads.grpo.trainer import GRPOTrainer
from rl_assets.workloads.seams import TrainingWorkspace


@dataclass(frozen=True)
class TaskTrainer:
    """``--trainer none`` (:class:`FixedPolicyTrainer`) or ``--trainer grpo`` (:class:`GRPOTrainer`)."""

    fixed: FixedPolicyTrainer = field(default_factory=FixedPolicyTrainer)
    grpo: GRPOTrainer = field(default_factory=GRPOTrainer, compare=False)

    def initial(self, config: ExperimentConfig) -> Policy:
        return (self.grpo if config.trainer == "grpo" else self.fixed).initial(config)

    def update(self, parent: Policy, batch: list[Reward], lr: float, workspace: TrainingWorkspace) -> Policy:
        return (self.grpo if parent.lm is not None else self.fixed).update(parent, batch, lr, workspace)

    def checkpoint(self, policy: Policy) -> str:
        return policy.model_dump_json()

    def restore(self, checkpoint: str) -> Policy:
        return Policy.model_validate_json(checkpoint)
