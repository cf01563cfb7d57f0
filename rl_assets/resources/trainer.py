"""The trainer resource: applies each training step exactly once.

Protocol for step ``s`` of ``(experiment, rubric)``:

1. a ledger row for the step exists -> load its checkpoint (hash-verified)
   and return it; nothing is applied;
2. otherwise call the detached actor with the step's identity (parent policy
   hash + canonical batch hash) and the parent policy; the actor applies it
   once, or returns what it already applied for that identity;
3. write the checkpoint, then the ledger row (insert-if-absent).

A crash after 2 re-runs 2, where the actor recognises the identity; a lost
actor is rebuilt from the parent checkpoint. The ledger therefore holds
exactly one application per step, and the policy reflects each step once.
"""

from __future__ import annotations

import dagster as dg
from pydantic import PrivateAttr

from rl_assets.domain.hashing import content_hash
from rl_assets.domain.models import Policy, Reward
from rl_assets.stores.training import AppliedStep, CheckpointStore, TrainingLedger


class TrainerResource(dg.ConfigurableResource):
    """Connects to a Ray cluster (the home's head, or KubeRay) and drives the actor."""

    ray_address: str
    namespace: str = "rl-assets"

    _connected: bool = PrivateAttr(default=False)

    def _actor(self, experiment: str):
        import ray

        from rl_assets.trainer_actor import TrainerActor

        if not self._connected:
            ray.init(
                address=self.ray_address,
                namespace=self.namespace,
                ignore_reinit_error=True,
                log_to_driver=False,
                logging_level="WARNING",
            )
            self._connected = True
        return TrainerActor.options(name=f"trainer-{experiment}", lifetime="detached", get_if_exists=True).remote()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._connected:
            import ray

            ray.shutdown()  # detaches this process only; the actor lives on

    def train_step(
        self,
        ledger: TrainingLedger,
        checkpoints: CheckpointStore,
        experiment: str,
        rubric: str,
        step: int,
        parent: Policy,
        batch: list[Reward],
        lr: float,
    ) -> tuple[Policy, AppliedStep, bool]:
        """``(policy after the step, its ledger row, applied now)``."""
        recorded = ledger.get(experiment, rubric, step)
        if recorded is not None:
            policy = checkpoints.load(experiment, rubric, step, expected_hash=recorded.policy_hash)
            if policy is None:
                raise RuntimeError(f"ledger records {experiment}/{rubric}/s{step} but its checkpoint is missing")
            return policy, recorded, False
        identity = content_hash({"parent": parent.content_hash, "batch": [r.content_hash for r in batch], "lr": lr})
        import ray

        policy_json, pid, applied_now = ray.get(
            self._actor(experiment).apply.remote(
                f"{experiment}/{rubric}",
                identity,
                parent.model_dump_json(),
                [r.model_dump_json() for r in batch],
                lr,
            )
        )
        policy = Policy.model_validate_json(policy_json)
        checkpoints.save(experiment, rubric, step, policy)
        row = ledger.record(
            AppliedStep(
                experiment=experiment,
                rubric=rubric,
                step=step,
                identity=identity,
                parent_hash=parent.content_hash,
                policy_hash=policy.content_hash,
                version=policy.version,
                actor_pid=pid,
            )
        )
        return policy, row, applied_now
