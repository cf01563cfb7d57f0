"""The trainer: a detached Ray actor that holds the policy between steps.

It lives on the home's long-lived Ray head, outliving drivers and runs, so the
"GPU state" stays warm and every step of an experiment is applied by the same
process. It remembers which step identities it applied, so a replayed call
returns the recorded result instead of updating twice; after a restart (a
killed actor or head) it is rebuilt from the parent checkpoint it is handed.
The update itself is the experiment's workload's
:class:`~rl_assets.workloads.seams.Trainer`, as are the checkpoints it is
handed and returns.
"""

from __future__ import annotations

import os
from pathlib import Path

import ray

from rl_assets.domain.models import Policy, Reward
from rl_assets.workloads.registry import REFERENCE, workload
from rl_assets.workloads.seams import TrainingWorkspace

INTERFACE = 3
"""The version of the actor's methods. A detached actor outlives upgrades of the code on a long-lived head, so
the resource replaces one whose interface differs instead of calling it with arguments it does not take
(version 2: ``apply`` takes the workload's name; 3: and the home's artifact root, the trainer's workspace)."""


@ray.remote(num_cpus=0, max_restarts=0)
class TrainerActor:
    def __init__(self) -> None:
        self.policies: dict[str, Policy] = {}
        self.applied: dict[str, Policy] = {}

    def interface(self) -> int:
        return INTERFACE

    def pid(self) -> int:
        return os.getpid()

    def apply(
        self,
        chain: str,
        identity: str,
        parent_checkpoint: str,
        batch_json: list[str],
        lr: float,
        workload_name: str = REFERENCE.name,
        artifacts: str = "",
    ) -> tuple[str, int, bool]:
        """Apply step ``identity`` to ``chain``; returns ``(policy checkpoint, pid, applied now)``.

        ``artifacts`` is the home's artifact root: where the trainer reads the batch's trajectories and
        writes checkpoint files (:class:`~rl_assets.workloads.seams.TrainingWorkspace`).
        """
        trainer = workload(workload_name).trainer
        if identity in self.applied:
            return trainer.checkpoint(self.applied[identity]), os.getpid(), False
        parent = trainer.restore(parent_checkpoint)
        current = self.policies.get(chain)
        if current is None or current.content_hash != parent.content_hash:
            current = parent  # restore from the checkpoint after a restart or a rewind
        workspace = TrainingWorkspace(artifacts=Path(artifacts), experiment=chain.rsplit("/", 1)[0])
        new = trainer.update(current, [Reward.model_validate_json(r) for r in batch_json], lr, workspace)
        self.policies[chain] = new
        self.applied[identity] = new
        return trainer.checkpoint(new), os.getpid(), True
