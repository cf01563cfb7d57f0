"""World store on Kubernetes: sealed worlds as VolumeSnapshots, forks as PVCs cloned from them.

The Kubernetes implementation of the :class:`~rl_assets.workloads.seams.WorldStore`
and :class:`~rl_assets.workloads.seams.Sandbox` seams, like
:class:`~rl_assets.resources.world_store.WorldStoreResource` locally
(``tests/test_workloads.py`` checks both against them), so the assets do not
know where they run:

- ``ensure_built`` runs in the ``world_job`` run worker, which has a fresh
  ephemeral volume mounted at ``/world`` (the driver sensor tags the run, see
  :func:`rl_assets.driver.deployment.launch_tags`); it builds the world there,
  snapshots that volume's PVC and records the seal (hash and snapshot) in
  Postgres, under a per-world advisory lock so concurrent builds build once.
  A snapshot is immutable, so the seal is never re-hashed.
- ``rollout`` clones a fork PVC from the snapshot, runs the sandbox runner in
  a rollout pod on it (no network, no secret, no token; see
  :mod:`rl_assets.kubernetes.pod_specs`), reads the rollout from the pod's
  log, and deletes pod and fork, also after a failure.
- A task world is built the same way from the recorded task's ``environment/``
  (the snapshot in the home, :mod:`rl_assets.tasks.snapshot`); ``task_session``
  clones its fork, starts the attempt's task pod on the task's image with the
  fork at its working directory (:mod:`rl_assets.kubernetes.task_pods`), and
  runs the agent's commands and the verifier in it through the exec API
  (:mod:`rl_assets.kubernetes.task_sessions`); pod and fork are deleted after.
"""

from __future__ import annotations

import math
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from rl_assets.containers.images import TaskImage
from rl_assets.domain.agent import Rollout
from rl_assets.domain.waiting import Waiting
from rl_assets.domain.world import build_world
from rl_assets.home.layout import Home
from rl_assets.home.settings import POD_NAME_ENV, settings
from rl_assets.kubernetes.names import world_build_claim_name, world_snapshot_name
from rl_assets.kubernetes.pod_specs import FORK_MOUNT, WORLD_MOUNT, rollout_pod
from rl_assets.kubernetes.rollouts import PodPhases, RolloutPods
from rl_assets.kubernetes.task_pods import PodOwner, task_image, task_pod
from rl_assets.kubernetes.task_sessions import TaskPods
from rl_assets.kubernetes.tiers import TRIAL
from rl_assets.kubernetes.volumes import WorldNotSealedError, WorldVolumes
from rl_assets.sandbox.launcher import SandboxTimeout, rollout_from_output
from rl_assets.sandbox.protocol import ForkLayout
from rl_assets.stores.database import Database
from rl_assets.stores.world_seals import WorldSeals
from rl_assets.tasks.snapshot import is_task_world, snapshot_task, write_task_world
from rl_assets.tasks.task import Task
from rl_assets.workloads.seams import AttemptFork, RequestFactory, TaskSession
from rl_assets.worlds.local import tree_hash

API_CONNECTIONS = 32
"""Connections the API client keeps for the process's threads (a request beyond them opens one it closes after)."""
POD_START_ALLOWANCE_S = 120.0
"""How much longer than the rollout's own timeout the step waits for its pod (scheduling, image pull)."""


class K8sWorldStoreResource(dg.ConfigurableResource):
    """Worlds and forks in one namespace, through the Kubernetes API (in-cluster credentials)."""

    namespace: str
    image: str
    storage_class: str = "rl-assets-worlds"
    snapshot_class: str = "rl-assets-worlds"
    world_size: str = "1Gi"
    home: str | None = None
    """Where the recorded task snapshots are (the home volume every run and step pod mounts); unset:
    ``$RL_ASSETS_HOME``, which those pods have."""
    task_start_timeout_s: float = 600.0
    """How long a task pod may take to be scheduled and pull its image before its attempt fails."""

    _api_client: object | None = PrivateAttr(default=None)
    _client_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _sealed: dict[str, str] = PrivateAttr(default_factory=dict)
    _driver: str = PrivateAttr(default_factory=lambda: uuid.uuid4().hex[:12])
    """This resource's label on the rollout pods it starts: its threads wait on all of them through one LIST."""
    _phases: PodPhases | None = PrivateAttr(default=None)
    """Made with the API client: one listing of this resource's rollout pods for all its threads."""

    def _client(self):
        """One API client for the process, made once however many trial threads ask at the same time. Its
        connection pool keeps ``API_CONNECTIONS``: a rollout run's threads each wait on their own pod, and with the
        client's default (five per CPU) most of their requests would open and close a connection of their own."""
        from kubernetes import client, config

        with self._client_lock:
            if self._api_client is None:
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    config.load_kube_config()
                configuration = client.Configuration.get_default_copy()
                configuration.connection_pool_maxsize = API_CONNECTIONS
                self._api_client = client.ApiClient(configuration)
                self._phases = PodPhases(client.CoreV1Api(self._api_client), self.namespace, self._driver)
            return self._api_client

    def _volumes(self) -> WorldVolumes:
        from kubernetes import client

        api = self._client()
        return WorldVolumes(
            client.CoreV1Api(api), client.CustomObjectsApi(api), self.namespace, self.storage_class, self.snapshot_class
        )

    def ensure_built(self, world_id: str) -> tuple[str, bool]:
        """Build, snapshot and seal the world once, under its build lock (see :func:`_build_lock`)."""
        with _build_lock(world_id):
            seal = _seal(world_id)
            if seal is not None:
                return seal, False
            return self._build(world_id), True

    def _build(self, world_id: str) -> str:
        root = Path(WORLD_MOUNT)
        for leftover in root.iterdir():  # a crashed build's partial files
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        staging = root / f".build-{uuid.uuid4().hex}"
        if is_task_world(world_id):
            write_task_world(Home.resolve(self.home).tasks, world_id, staging)
        else:
            build_world(world_id, staging)
        digest = tree_hash(staging)
        for entry in staging.iterdir():
            entry.rename(root / entry.name)
        staging.rmdir()
        pod = settings().pod_name
        if pod is None:
            raise RuntimeError(f"{POD_NAME_ENV} is not set: a world is built in its run worker pod, which names it")
        snapshot = self._volumes().snapshot(world_id, world_build_claim_name(pod))
        _record_seal(world_id, digest, snapshot)
        return digest

    def verified_hash(self, world_id: str) -> str:
        """The seal from Postgres, O(1): forks are cloned from an immutable VolumeSnapshot, not from the PVC.

        Read once per world by this resource: a seal never changes (the first one stands, and its snapshot is
        immutable), so a rollout run's trials do not open a connection each; an absent one is asked again."""
        if world_id not in self._sealed:
            seal = _seal(world_id)
            if seal is None:
                raise WorldNotSealedError(f"world {world_id} has not been built and snapshotted yet")
            self._sealed[world_id] = seal
        return self._sealed[world_id]

    def audited_hash(self, world_id: str) -> str:
        """The same as :meth:`verified_hash`: a VolumeSnapshot cannot be modified, so there is nothing to re-hash."""
        return self.verified_hash(world_id)

    def location(self, world_id: str) -> str:
        return f"snapshot {self.namespace}/{world_snapshot_name(world_id)}"

    def network_isolated(self) -> bool:
        return True  # rollout pods match the deny-all-egress NetworkPolicy (deploy/k8s/networkpolicy-rollout.yaml)

    def fork_kind(self) -> str:
        return "pvc-clone"

    def rollout(self, fork: AttemptFork, make_request: RequestFactory, timeout_s: float) -> Rollout:
        from kubernetes import client

        request = make_request(ForkLayout(kind="copy", lower="", upper="", work="", merged=FORK_MOUNT))
        core = client.CoreV1Api(self._client())  # made with the client: the pod phases all its threads share
        pods = RolloutPods(core, self.namespace, Waiting(timeout_s=timeout_s + POD_START_ALLOWANCE_S), self._phases)
        with self._fork(fork) as claim:
            pod = rollout_pod(
                experiment=fork.experiment,
                trial_id=fork.trial_id,
                attempt=fork.attempt_id,
                fork_claim=claim,
                image=self.image,
                request_json=request.model_dump_json(),
                driver=self._driver,
            )
            pod["spec"]["activeDeadlineSeconds"] = max(1, math.ceil(timeout_s))  # the kubelet enforces the timeout
            outcome = pods.run(pod)
        if outcome.reason == "DeadlineExceeded":
            raise SandboxTimeout(f"rollout of {fork.trial_id} exceeded {timeout_s}s and its pod was killed")
        return rollout_from_output(outcome.exit_code, outcome.log, outcome.log)

    def _fork(self, fork: AttemptFork) -> AbstractContextManager[str]:
        """A PVC cloned from the world's snapshot for the attempt, Bound; its name, the PVC deleted after."""
        return self._volumes().fork(fork.experiment, fork.trial_id, fork.attempt_id, fork.world_id)

    def ensure_image(self, world_id: str) -> TaskImage | None:
        """No image is built in the cluster: a task's pod runs its pushed ``docker_image``, pulled by the kubelet
        (a Dockerfile-only task is refused when the experiment is recorded: :mod:`rl_assets.tasks.locality`)."""
        return None

    def built_image(self, world_id: str) -> TaskImage | None:
        """No image is known here: the kubelet pulls a task pod's ``docker_image`` (its name is in the world)."""
        return None

    def task(self, world_id: str) -> Task:
        """The recorded task of a task world (its snapshot in the home volume)."""
        return snapshot_task(Home.resolve(self.home).tasks, world_id)

    def task_session(self, fork: AttemptFork, task: Task) -> AbstractContextManager[TaskSession]:
        return self._task_session(fork, task)

    @contextmanager
    def _task_session(self, fork: AttemptFork, task: Task) -> Iterator[TaskSession]:
        """The attempt's task pod on a fresh fork of the world; the pod, then the fork, deleted on exit.

        The pod's deadline covers the agent's (the task's ``[agent] timeout_sec``, else the trial
        step's own deadline, which bounds the trial anyway), the verifier's and the start.
        """
        from kubernetes import client

        config = task.config
        deadline_s = (
            (config.agent.timeout_sec or TRIAL.deadline_s) + config.verifier.timeout_sec + POD_START_ALLOWANCE_S
        )
        pods = TaskPods(client.CoreV1Api(self._client()), self.namespace, Waiting(timeout_s=self.task_start_timeout_s))
        with self._fork(fork) as claim:
            pod = task_pod(
                experiment=fork.experiment,
                trial_id=fork.trial_id,
                attempt=fork.attempt_id,
                task=task,
                fork_claim=claim,
                image=task_image(task, self.image),
                deadline_s=deadline_s,
                owner=PodOwner.from_env(),
            )
            with pods.session(pod, task) as session:
                yield session


@contextmanager
def _seals() -> Iterator[WorldSeals]:
    """The seal store on a connection of its own, closed after use: build pods and steps call this rarely."""
    db = Database.from_env()
    try:
        yield WorldSeals(db)
    finally:
        db.close()


@contextmanager
def _build_lock(world_id: str) -> Iterator[None]:
    """A transaction-scoped Postgres advisory lock on the world, held through build, snapshot and seal.

    Two build runs of one world (a retried run, the sensor and a CLI driver)
    would otherwise both clear ``/world`` of "leftovers" and build into it at
    once. Build pods have no shared filesystem to lock, so the lock is in
    Postgres; it is released with the transaction, also when the pod dies.
    """
    with _seals() as seals, seals.building(world_id):
        yield


def _seal(world_id: str) -> str | None:
    with _seals() as seals:
        return seals.get(world_id)


def _record_seal(world_id: str, digest: str, snapshot: str) -> None:
    with _seals() as seals:
        seals.record(world_id, digest, snapshot)
