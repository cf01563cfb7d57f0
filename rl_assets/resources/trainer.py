"""The trainer resource: applies each training step exactly once.

Protocol for step ``s`` of ``(experiment, rubric)``:

1. a ledger row for the step exists -> load its checkpoint (hash-verified)
   and return it; nothing is applied;
2. otherwise call the detached actor with the step's identity (parent policy
   hash + canonical batch hash) and the parent policy; the actor applies it
   once, or returns what it already applied for that identity;
3. write the checkpoint, then the ledger row (insert-if-absent).

1-3 run under the step's lock (:meth:`TrainingLedger.step_lock`), and what is
returned is always the policy of the row in the ledger, never a policy that
lost to another writer's row.

The update and the checkpoint format are the experiment's workload's
:class:`~rl_assets.workloads.seams.Trainer`, run in the actor; the ledger and
the exactly-once protocol are the same for every workload.

A crash after 2 re-runs 2, where the actor recognises the identity; a lost
actor is rebuilt from the parent checkpoint. The ledger therefore holds
exactly one application per step, and the policy reflects each step once.

A ledgered step whose checkpoint was lost or damaged is re-derived: the same
identity is replayed from the parent, and the result must have the ledger's
policy hash (else it is an error, never a silently different policy). That
writes the checkpoint again without adding a ledger row.
"""

from __future__ import annotations

import dagster as dg
from pydantic import PrivateAttr

from rl_assets.domain.invariants import step_identity
from rl_assets.domain.models import Policy, Reward
from rl_assets.domain.waiting import Waiting
from rl_assets.stores.artifacts import CorruptArtifactError
from rl_assets.stores.training import AppliedStep, CheckpointStore, TrainingLedger
from rl_assets.workloads.registry import REFERENCE, Workload, workload

ACTOR_NAME_FREED_S = 30.0
"""How long a replaced actor's name may take to be freed by the cluster."""


def _speaks_current_interface(actor) -> bool:
    """Whether a (possibly older) detached actor has this code's methods; one round trip."""
    import ray

    from rl_assets.trainer.actor import INTERFACE

    interface = getattr(actor, "interface", None)  # a handle has the methods of the class the actor was made from
    if interface is None:
        return False
    try:
        return ray.get(interface.remote()) == INTERFACE
    except ray.exceptions.RayTaskError:  # the handle's class has it, the running actor does not
        return False


def _replace(actor, name: str) -> None:
    """Kill an actor started by older code and wait until its name is free; the new one restores from checkpoints."""
    import ray

    ray.kill(actor, no_restart=True)
    Waiting(timeout_s=ACTOR_NAME_FREED_S, interval_s=0.05).value(  # the GCS frees the name asynchronously
        lambda: _name_free(name),
        lambda: RuntimeError(f"the outdated trainer actor {name!r} was killed but its name was not freed"),
    )


def _name_free(name: str) -> bool:
    """Whether no actor on the cluster holds ``name``."""
    import ray

    try:
        ray.get_actor(name)
    except ValueError:
        return True
    return False


def actor_name(experiment: str) -> str:
    """The detached actor that trains ``experiment`` (every rubric's chain of it), by name on the cluster."""
    return f"trainer-{experiment}"


class TrainerResource(dg.ConfigurableResource):
    """Connects to a Ray cluster (the home's head, or KubeRay) and drives the actor."""

    ray_address: str
    namespace: str = "rl-assets"

    _connected: bool = PrivateAttr(default=False)
    _current: set[str] = PrivateAttr(default_factory=set)
    """Experiments whose actor this process has seen answer with the current interface."""

    def _connect(self) -> None:
        import ray

        if not self._connected:
            ray.init(
                address=self.ray_address,
                namespace=self.namespace,
                ignore_reinit_error=True,
                log_to_driver=False,
                logging_level="WARNING",
            )
            self._connected = True

    def _actor(self, experiment: str):
        from rl_assets.trainer.actor import TrainerActor

        self._connect()
        name = actor_name(experiment)
        actor = TrainerActor.options(name=name, lifetime="detached", get_if_exists=True).remote()
        if experiment not in self._current:
            if not _speaks_current_interface(actor):
                _replace(actor, name)
                actor = TrainerActor.options(name=name, lifetime="detached", get_if_exists=True).remote()
            self._current.add(experiment)
        return actor

    def release(self, experiment: str) -> bool:
        """End the experiment's actor, if it lives; True if one was ended.

        Called once the experiment's chains are all trained (``weights`` decides): the actor holds the policy (a
        language model and its optimiser, gigabytes) only to keep the next step warm, and a home that trains
        one experiment after another would otherwise keep every finished one's in memory until
        ``rl-assets stop``. A later re-scoring starts a new actor from the checkpoints, as after a lost one.
        """
        import ray

        self._connect()
        try:
            actor = ray.get_actor(actor_name(experiment))
        except ValueError:  # no such actor: never started here, or already ended
            return False
        ray.kill(actor, no_restart=True)
        self._current.discard(experiment)
        return True

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._connected:
            import ray

            ray.shutdown()  # detaches this process only; the actor lives on

    def _apply(
        self,
        checkpoints: CheckpointStore,
        experiment: str,
        rubric: str,
        identity: str,
        parent: Policy,
        batch: list[Reward],
        lr: float,
        chosen: Workload,
    ) -> tuple[Policy, int, bool]:
        import ray

        checkpoint, pid, applied_now = ray.get(
            self._actor(experiment).apply.remote(
                f"{experiment}/{rubric}",
                identity,
                chosen.trainer.checkpoint(parent),
                [r.model_dump_json() for r in batch],
                lr,
                chosen.name,
                str(checkpoints.artifacts.root),
            )
        )
        return chosen.trainer.restore(checkpoint), pid, applied_now

    def _rederive(
        self,
        checkpoints: CheckpointStore,
        recorded: AppliedStep,
        identity: str,
        parent: Policy,
        batch: list[Reward],
        lr: float,
        chosen: Workload,
    ) -> Policy:
        where = f"{recorded.experiment}/{recorded.rubric}/s{recorded.step}"
        if identity != recorded.identity:
            raise RuntimeError(
                f"the checkpoint of {where} is lost and its inputs changed since it was trained "
                f"(identity {identity}, ledger {recorded.identity}); it cannot be re-derived"
            )
        policy, _, _ = self._apply(
            checkpoints, recorded.experiment, recorded.rubric, identity, parent, batch, lr, chosen
        )
        if policy.content_hash != recorded.policy_hash:
            raise RuntimeError(
                f"re-deriving the lost checkpoint of {where} gave policy {policy.content_hash}, "
                f"the ledger recorded {recorded.policy_hash}"
            )
        checkpoints.save(recorded.experiment, recorded.rubric, recorded.step, policy)
        return policy

    def _recorded_policy(
        self,
        checkpoints: CheckpointStore,
        recorded: AppliedStep,
        identity: str,
        parent: Policy,
        batch: list[Reward],
        lr: float,
        chosen: Workload,
    ) -> Policy:
        """The policy of a ledgered step: its checkpoint, or re-derived if that was lost."""
        try:
            policy = checkpoints.load(recorded.experiment, recorded.rubric, recorded.step, recorded.policy_hash)
        except CorruptArtifactError:
            policy = None
        return policy or self._rederive(checkpoints, recorded, identity, parent, batch, lr, chosen)

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
        workload_name: str = REFERENCE.name,
    ) -> tuple[Policy, AppliedStep, bool]:
        """``(policy after the step, its ledger row, applied now)``: always the policy the ledger holds.

        The step's lock is held from the ledger check to the ledger write, so
        a second writer of the step waits and then reads the first one's row.
        """
        chosen = workload(workload_name)
        identity = step_identity(parent.content_hash, batch, lr)
        with ledger.step_lock(experiment, rubric, step):
            recorded = ledger.get(experiment, rubric, step)
            if recorded is not None:
                return (
                    self._recorded_policy(checkpoints, recorded, identity, parent, batch, lr, chosen),
                    recorded,
                    False,
                )
            policy, pid, applied_now = self._apply(checkpoints, experiment, rubric, identity, parent, batch, lr, chosen)
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
        if row.policy_hash != policy.content_hash:  # another writer's row won (the lock was lost with Postgres)
            return self._recorded_policy(checkpoints, row, identity, parent, batch, lr, chosen), row, False
        return policy, row, applied_now
