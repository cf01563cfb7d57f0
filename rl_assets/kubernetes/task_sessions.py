"""A Harbor task trial on Kubernetes: its pod, the agent's commands in it, then the verifier.

The :class:`~rl_assets.workloads.seams.TaskSession` of a task pod (:mod:`.task_pods`). The agent's
loop stays in the trusted worker; each of its commands is one exec (:mod:`.pod_exec`). The verifier
keeps the local sandbox's promises (:mod:`rl_assets.sandbox.task_trial`) with what a pod offers:

1. every process the agent left (a command's background children survive it in a pod, as in any
   container) is killed: ``kill -s KILL -1`` as the pod's one user signals every process but the
   pod's init and the caller, and with no privilege (no setuid, no capability, no
   ``no_new_privs`` escape) nothing of the agent's runs as another user;
2. ``/tests``, ``/logs`` and ``/tmp`` (the pod's empty volumes, which the agent could write) are
   emptied, and checked empty, so nothing the agent planted there (a ``conftest.py``, a reward file,
   a ``sitecustomize`` under ``HOME``) reaches the verifier;
3. the task's ``tests/`` are copied in only then (a tar stream on the exec's stdin) and
   ``/logs/verifier`` made; ``tests/test.sh`` runs in the working directory under
   ``[verifier] timeout_sec`` with ``[verifier] env``;
4. the reward files are read through the API and parsed by :func:`rl_assets.tasks.verifier.rewards_from`,
   as locally: the same errors for a missing, empty, unparsable, non-finite or non-regular file.

The pod is deleted when the session ends, whatever ended it (see :class:`TaskPods`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from rl_assets.domain.models import VerifierOutcome
from rl_assets.domain.waiting import Waiting
from rl_assets.kubernetes.names import OWNER_LABEL
from rl_assets.kubernetes.pod_exec import REPLY_GRACE_S, PodExec
from rl_assets.kubernetes.rollouts import RolloutPods
from rl_assets.kubernetes.task_pods import SCRATCH_MOUNTS, TASK_CONTAINER
from rl_assets.sandbox.exec_protocol import TOOLS_CHECK, ContainerVerifier
from rl_assets.sandbox.protocol import CommandResult
from rl_assets.tasks.task import Task

SETUP_WAIT_S = 120.0
"""How long the trusted phases' own commands (clearing, copying, reading a reward file) may take."""
SCRATCH = tuple(SCRATCH_MOUNTS.values())
"""Emptied before the verifier (the pod's empty volumes, which the agent could write)."""
START_FAILURES = ("ErrImageNeverPull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError")
"""Waiting reasons of a task container that will not start by waiting longer."""


class TaskPodError(RuntimeError):
    """The task pod could not be started or does not hold what a task's commands need: the attempt is over."""


@dataclass(frozen=True)
class K8sTaskSession:
    """The :class:`~rl_assets.workloads.seams.TaskSession` of one attempt's task pod."""

    exec: PodExec
    task: Task
    workdir: str

    def run(self, command: str, timeout_s: float) -> CommandResult:
        return self.exec.command(command, timeout_s, workdir=self.workdir)

    def check_tools(self) -> None:
        """Refuse an image without the tools every command and the verifier's files go through."""
        code, output = self.exec.argv(["bash", "-c", TOOLS_CHECK], SETUP_WAIT_S)
        missing = output.text().split()
        if code != 0 or missing:
            raise TaskPodError(
                f"the task's image lacks {', '.join(missing) or 'a working bash'}: "
                "a task pod's commands need bash, timeout, env, head, tar and find"
            )

    def verify(self, answer: str, deadline: float | None = None) -> VerifierOutcome:
        verifier = ContainerVerifier(
            self.exec,
            self.exec,
            self.workdir,
            SCRATCH,
            SETUP_WAIT_S,
            REPLY_GRACE_S,
            TaskPodError,
            f"task pod {self.exec.pod}",
        )
        return verifier.verify(self.task, answer, deadline)


class TaskPods:
    """Starts task pods in one namespace and deletes them, also when anything fails."""

    def __init__(self, core: client.CoreV1Api, namespace: str, waiting: Waiting | None = None) -> None:
        self._pods = RolloutPods(core, namespace, waiting)
        self._core = core
        self.namespace = namespace
        self._waiting = waiting or Waiting()

    @contextmanager
    def session(self, pod: dict[str, Any], task: Task) -> Iterator[K8sTaskSession]:
        """Create ``pod`` (from :func:`~rl_assets.kubernetes.task_pods.task_pod`), await it running; delete it after.

        A pod of the same trial still present was left by a killed attempt (attempts of one trial
        never overlap) and is deleted first, as for rollout pods.
        """
        name = pod["metadata"]["name"]
        self._pods.remove_leftovers(pod["metadata"]["labels"][OWNER_LABEL], name)
        try:
            self._core.create_namespaced_pod(self.namespace, pod)
            self._waiting.until(f"task pod {name} running", lambda: self._running(name))
            container = pod["spec"]["containers"][0]
            session = K8sTaskSession(
                PodExec(self._core, self.namespace, name, TASK_CONTAINER), task, container["workingDir"]
            )
            session.check_tools()
            yield session
        finally:
            self._pods.delete(name)

    def _running(self, name: str) -> bool:
        status = self._pods.read(name).status
        if status.phase == "Running":
            return True
        if status.phase in ("Succeeded", "Failed"):
            raise TaskPodError(f"task pod {name} ended before its trial did ({status.reason or status.phase})")
        for container in status.container_statuses or []:
            waiting = container.state.waiting if container.state else None
            if waiting is not None and waiting.reason in START_FAILURES:
                raise TaskPodError(f"task pod {name} cannot start: {waiting.reason}: {(waiting.message or '')[:300]}")
        return False
