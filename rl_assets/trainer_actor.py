"""The trainer: a detached Ray actor that holds the policy between steps.

It lives on the home's long-lived Ray head, outliving drivers and runs, so the
"GPU state" stays warm and every step of an experiment is applied by the same
process. It remembers which step identities it applied, so a replayed call
returns the recorded result instead of updating twice; after a restart (a
killed actor or head) it is rebuilt from the parent checkpoint it is handed.
"""

from __future__ import annotations

import os

import ray

from rl_assets.domain.bandit import apply_step
from rl_assets.domain.models import Policy, Reward


@ray.remote(num_cpus=0, max_restarts=0)
class TrainerActor:
    def __init__(self) -> None:
        self.policies: dict[str, Policy] = {}
        self.applied: dict[str, Policy] = {}

    def pid(self) -> int:
        return os.getpid()

    def apply(
        self, chain: str, identity: str, parent_json: str, batch_json: list[str], lr: float
    ) -> tuple[str, int, bool]:
        """Apply step ``identity`` to ``chain``; returns ``(policy json, pid, applied now)``."""
        if identity in self.applied:
            return self.applied[identity].model_dump_json(), os.getpid(), False
        parent = Policy.model_validate_json(parent_json)
        current = self.policies.get(chain)
        if current is None or current.content_hash != parent.content_hash:
            current = parent  # restore from the checkpoint after a restart or a rewind
        new = apply_step(current, [Reward.model_validate_json(r) for r in batch_json], lr)
        self.policies[chain] = new
        self.applied[identity] = new
        return new.model_dump_json(), os.getpid(), True
