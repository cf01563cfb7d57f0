"""The seams a workload plugs into, as protocols, and what each owes the durability story.

The orchestration (assets, ledgers, driver) guarantees what a run promises: a
trial's rollout is reused when its identity is unchanged, a verdict is paid at
most once per (trajectory, rubric, judge), a training step is applied exactly
once. It can only keep those promises if every implementation of a seam keeps
its side of the contract written here: determinism where identity is hashed,
purity where a ledger replays, isolation where untrusted code runs.

The records that cross these seams (:class:`~rl_assets.domain.models.Trajectory`,
:class:`~rl_assets.domain.models.Rubric`, :class:`~rl_assets.domain.models.Verdict`,
:class:`~rl_assets.domain.models.Reward`, :class:`~rl_assets.domain.models.Policy`)
are still the reference workload's; their hashes are identities stored in
every home, so they change shape only together with a migration.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rl_assets.containers.images import TaskImage
from rl_assets.domain.agent import Rollout
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy, Reward, Trajectory, TrialSpec, Verdict, VerifierOutcome
from rl_assets.domain.rubrics import AnyRubric
from rl_assets.domain.transcripts import Usage
from rl_assets.home.services.policy_server import PolicyAddress
from rl_assets.sandbox.protocol import CommandResult, ForkLayout, SandboxRequest
from rl_assets.stores.artifacts import ArtifactStore
from rl_assets.stores.trials import TrialRecords
from rl_assets.tasks.task import Task

RequestFactory = Callable[[ForkLayout], SandboxRequest]
"""Builds an attempt's sandbox request once its fork exists (the request names the fork)."""


@dataclass(frozen=True)
class Attempt:
    """One rollout attempt of a trial, as the harness hands it to the agent."""

    config: ExperimentConfig
    attempt_id: int
    """The attempt's row in the generation log: unique, so its fork is its own."""
    timeout_s: float
    tool_latency_s: float
    on_model_call: Callable[[str, Usage], None]
    """Told ``(model, usage)`` of every answered model call as it arrives: the cost ledger's hook."""
    policy_server: Callable[[], PolicyAddress] | None = None
    """``--policy local``: the home's policy server, started if it is not running (the harness's, not the agent's)."""
    api_key: Callable[[str], str] | None = None
    """The value of the home's API key of that name, read now (``--policy-key-name``); None where keys come from
    the environment (a Kubernetes Secret)."""

    def fork(self, spec: TrialSpec) -> AttemptFork:
        """This attempt of ``spec``'s private fork of its world."""
        return AttemptFork(spec.world_id, self.config.name, spec.trial_id, self.attempt_id)


class TaskSession(Protocol):
    """A task trial's sandbox on its private fork: the agent's commands, then the task's verifier.

    Owed: every command runs in the sandbox with the world as its working
    directory and nothing of the host; ``verify`` runs the task's tests only
    after every command of the agent has ended, with the tests and the reward
    directory made for it alone, and reads the reward on the trusted side.
    """

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """The :class:`~rl_assets.sandbox.protocol.Shell` seam: one agent command."""
        ...

    def verify(self, answer: str, deadline: float | None = None) -> VerifierOutcome:
        """The task's ``tests/test.sh`` on the fork as the agent left it, with the agent's final message in
        ``/logs/agent/answer.txt`` (Harbor's agent log directory); raises when it gives no usable reward.
        ``deadline`` (``time.monotonic()``): the trial's; the verifier gets at most what is left of it."""
        ...


@dataclass(frozen=True)
class AttemptFork:
    """Which world an attempt's private fork is made of, and whose attempt it is.

    Both sandboxed calls (:meth:`Sandbox.rollout`, :meth:`Sandbox.task_session`) take it, so an
    attempt is named the same way wherever a fork, a pod or a container is made for it.
    """

    world_id: str
    experiment: str
    trial_id: str
    attempt_id: int
    """The attempt's row in the generation log: unique, so the fork is this attempt's alone."""

    @property
    def owner(self) -> str:
        """The trial the fork belongs to, as forks and containers are named after it (``experiment/trial``)."""
        return f"{self.experiment}/{self.trial_id}"


class WorldStore(Protocol):
    """Sealed worlds: built once, sealed, checked, never modified.

    Owed to the durability story:

    - ``ensure_built`` builds and seals a world once, however many callers race
      (a world is never modified after its seal), and ``ensure_image`` its task's image;
    - ``verified_hash`` is the cheap per-attempt check that the world is still
      the sealed one (it is part of a trajectory's identity), and raises
      :class:`~rl_assets.worlds.local.WorldTamperedError` when it is not;
      ``audited_hash`` is the full re-hash.
    """

    def ensure_built(self, world_id: str) -> tuple[str, bool]:
        """``(content hash, built now)``: the world's seal, building it first if there is none."""
        ...

    def verified_hash(self, world_id: str) -> str:
        """The world's sealed hash, checked cheaply against what is there now."""
        ...

    def audited_hash(self, world_id: str) -> str:
        """The world's hash, every byte re-checked (what ``audit`` uses)."""
        ...

    def location(self, world_id: str) -> str:
        """Where the sealed world lives, for humans (metadata, errors)."""
        ...

    def task(self, world_id: str) -> Task:
        """The recorded Harbor task a task world was built from."""
        ...

    def ensure_image(self, world_id: str) -> TaskImage | None:
        """A task world's container image, built once by its build context's hash (the ``task_images`` asset's
        work); None where there is nothing to build: a world of plain files, or a cluster, whose kubelet pulls
        the task's pushed image."""
        ...

    def built_image(self, world_id: str) -> TaskImage | None:
        """The image :meth:`ensure_image` built, for a trial to run in (None where it builds none)."""
        ...


class Sandbox(Protocol):
    """Attempts on private forks of sealed worlds, where untrusted code runs.

    Owed to the durability story:

    - ``rollout`` runs one attempt in a sandbox on a fork private to that
      attempt, removes the fork afterwards (also after a failure or timeout),
      and kills the attempt at ``timeout_s``, leaving no process behind; the
      rollout it returns is built from evidence the harness observed, never
      from what the sandboxed code claims;
    - ``task_session`` gives a task trial the same: a fork of its own, removed
      with every process and mount when the session is left, however it is left;
    - ``network_isolated`` and ``fork_kind`` are facts recorded in each
      trajectory's metadata, so a run says how it was isolated.

    A fork is made from the world store's seal, so a sandbox comes with the
    world store whose worlds it forks (see :class:`Environment`).
    """

    def network_isolated(self) -> bool:
        """Whether a rollout's sandbox has no network."""
        ...

    def fork_kind(self) -> str:
        """How attempts' forks are made (``overlay``, ``copy``, ``pvc-clone``)."""
        ...

    def rollout(self, fork: AttemptFork, make_request: RequestFactory, timeout_s: float) -> Rollout:
        """One sandboxed attempt on a fresh fork of ``fork.world_id``, killed at ``timeout_s``."""
        ...

    def task_session(self, fork: AttemptFork, task: Task) -> AbstractContextManager[TaskSession]:
        """A task trial's sandbox on a fresh fork of ``fork.world_id``, removed (fork, processes, mounts) on exit."""
        ...


@dataclass(frozen=True)
class Environment:
    """What an agent's trial runs against: the sealed worlds, and the sandbox its attempts run in.

    Two parts, not one object, so each is wrapped or replaced on its own: injected faults
    (:mod:`rl_assets.resources.faults`) wrap only the sandbox. A deployment provides both from one
    resource, because a sandbox forks its own store's seals:
    :class:`~rl_assets.resources.world_store.WorldStoreResource` (bubblewrap, overlay or
    copy forks) and :class:`~rl_assets.resources.k8s_world_store.K8sWorldStoreResource`
    (pods, PVCs cloned from VolumeSnapshots). They are chosen by the deployment, not by
    the workload: the same workload runs on either. A new environment (containers, pods)
    implements :class:`WorldStore` and :class:`Sandbox`.
    """

    worlds: WorldStore
    sandbox: Sandbox


class Agent(Protocol):
    """One trial's loop against an environment and a policy.

    The reference agent's loop runs inside the sandbox
    (:mod:`rl_assets.sandbox.reference_agent`): its ``rollout`` hands the
    environment's :class:`Sandbox` the request for one attempt. The tasks
    workload's chat agent reads the recorded task from the :class:`WorldStore`,
    runs in the trusted worker and sends only its commands into a
    :class:`TaskSession`. Owed to the durability story: ``version`` names the
    agent's behaviour and is part of every trajectory's identity (change it
    whenever the agent would act differently, or stale rollouts are reused);
    the rollout is built from evidence the harness observed, and depends on
    nothing but the spec, the policy, the world (and for a served policy, the
    server's answers), so a retried trial produces what an unfailed attempt would have.
    """

    @property
    def version(self) -> str:
        """The agent's identity in trajectory hashes."""
        ...

    def rollout(self, environment: Environment, spec: TrialSpec, policy: Policy, attempt: Attempt) -> Rollout:
        """One attempt of ``spec`` under ``policy`` in ``environment``; raises when the attempt fails."""
        ...


class Judge(Protocol):
    """A verdict for a trajectory under a rubric: the paid call.

    The ledger around it (:meth:`rl_assets.resources.judge.JudgeResource.judge`)
    guarantees at-most-once billing per (trajectory, rubric, ``judge_id``),
    timeouts, rate limits and retries, so the judge itself is a plain call:
    no caching, no retrying, no bookkeeping. Owed: ``judge_id`` changes
    whenever verdicts would differ (another model, prompt or scale), because
    recorded verdicts are keyed by it and reused; and a verdict names the
    trajectory and rubric hashes it judged.
    """

    @property
    def judge_id(self) -> str:
        """The judge's identity in verdict keys and rate limits."""
        ...

    def verdict(self, trajectory: Trajectory, rubric: AnyRubric) -> Verdict:
        """Judge ``trajectory`` under ``rubric`` (raise on any failure; the caller decides about retries)."""
        ...


@dataclass(frozen=True)
class TrainingWorkspace:
    """What a trainer in the actor may read and write besides its arguments: the home's artifact store.

    A trainer on token data reads the step's trajectories here (each checked against the hash its reward
    names, so it trains on exactly what was judged), and one whose weights are files keeps its
    checkpoint directories under ``models`` (content-addressed, so a replay writes the same bytes).
    The actor must therefore see the home's files: the local Ray head does; on KubeRay the artifact
    root must be a shared volume.
    """

    artifacts: Path
    experiment: str

    @property
    def models(self) -> Path:
        """Where model checkpoint directories live, one per digest."""
        return self.artifacts / "models"

    def trajectory(self, reward: Reward) -> Trajectory:
        """The trajectory ``reward`` scored; raises when it is missing or not the one the reward names."""
        step, _, slot = reward.trial_id.removeprefix("s").partition("-")
        found = TrialRecords(ArtifactStore(self.artifacts)).trajectory(self.experiment, int(step), slot)
        if found is None or found.content_hash != reward.trajectory_hash:
            state = "missing" if found is None else f"{found.content_hash}, not {reward.trajectory_hash}"
            raise RuntimeError(f"trajectory of {reward.trial_id} in {self.experiment} is {state}")
        return found


class Trainer(Protocol):
    """The initial policy; one step's canonical batch applied to a parent policy; checkpoints and restores.

    Runs inside the detached trainer actor (:mod:`rl_assets.trainer.actor`),
    which remembers applied step identities; the training ledger around it
    makes each step applied exactly once and re-derives lost checkpoints by
    replaying a step. Owed: ``update`` is deterministic in (parent, batch, lr)
    (a replay must reproduce the ledger's policy hash; what it reads from the
    workspace is pinned by the batch's hashes), and ``restore`` inverts
    ``checkpoint`` exactly (a rebuilt actor resumes from a checkpoint it is
    handed). Files a trainer writes to the workspace must be written before
    ``update`` returns: the ledger row follows.
    """

    def initial(self, config: ExperimentConfig) -> Policy:
        """The policy step 0 starts from (version 0); the same for every call with an equal config."""
        ...

    def update(self, parent: Policy, batch: list[Reward], lr: float, workspace: TrainingWorkspace) -> Policy:
        """The policy after one step on ``batch`` (already in canonical order), version ``parent.version + 1``."""
        ...

    def checkpoint(self, policy: Policy) -> str:
        """The policy as a self-contained checkpoint."""
        ...

    def restore(self, checkpoint: str) -> Policy:
        """The policy of a checkpoint written by :meth:`checkpoint`."""
        ...
