"""The pod a Harbor task trial's attempt runs in: the task's image, its world at the working directory.

Where the reference rollout pod runs a whole rollout and exits, a task pod only *stays up*: its
container sleeps, and the trusted trial worker (the ``trajectories`` step pod) runs each of the
agent's commands in it, then the verifier, through the exec API (:mod:`rl_assets.kubernetes.pod_exec`).
The agent's loop and the model's API key never enter it.

What it is, by construction:

- the task's ``[environment] docker_image`` (a task of plain files runs on the deployment's own
  image, which has bash, coreutils and python3, as the local sandbox shows the machine's);
- the attempt's fork (a PVC cloned from the world's VolumeSnapshot: the task's ``environment/``
  files) at the working directory (``/app`` or ``[environment] workdir``), over whatever the image
  has there; ``/tmp``, ``/tests`` and ``/logs`` are empty volumes of the pod, everything else the
  image's, read-only;
- Pod Security ``restricted``: uid 10001, no privilege escalation, no capability, seccomp
  ``RuntimeDefault``; no service-account token, no service links, no Secret: its env is the task's
  ``[environment] env``, plain values;
- requests and limits from ``cpus``, ``memory_mb`` and ``storage_mb`` (Harbor's defaults where unset);
- no network, unless the task asks for it explicitly (``network_mode = "public"`` or
  ``allow_internet = true``): then it carries :data:`~rl_assets.kubernetes.names.NETWORK_LABEL`,
  which ``deploy/k8s/networkpolicy-tasks.yaml`` lets reach public addresses (never the cluster's);
- owned by the worker's pod, so the garbage collector deletes it if the worker dies without doing
  so, and killed by the kubelet at its ``activeDeadlineSeconds`` whatever happens to the worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from rl_assets.home.settings import settings
from rl_assets.kubernetes.names import (
    ATTEMPT_ANNOTATION,
    EXPERIMENT_ANNOTATION,
    NETWORK_LABEL,
    OWNER_LABEL,
    TIER_LABEL,
    TRIAL_ANNOTATION,
    owner_value,
    task_pod_name,
)
from rl_assets.kubernetes.pod_specs import ROLLOUT_SERVICE_ACCOUNT, container_security_context, pod_security_context
from rl_assets.sandbox.task_shell import DEFAULT_WORKDIR
from rl_assets.tasks.task import Task

TASK_TIER = "task"
TASK_CONTAINER = "task"
DEFAULT_CPUS, DEFAULT_MEMORY_MB, DEFAULT_STORAGE_MB = 1, 2048, 10240
"""Harbor's defaults for a task that names no resources."""
SCRATCH_MOUNTS = {"tmp": "/tmp", "tests": "/tests", "logs": "/logs"}
"""The pod's empty volumes: its only writable places besides the fork. ``/tests`` and ``/logs`` are
emptied, with every process of the agent killed, before the verifier's files go in."""
_RESERVED = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc", "/dev", "/sys", "/var/run")


@dataclass(frozen=True)
class PodOwner:
    """The worker pod a task pod belongs to (its owner reference)."""

    name: str
    uid: str

    @classmethod
    def from_env(cls) -> PodOwner | None:
        """The worker's own pod, from the downward API's env vars of a trial step pod; ``None`` elsewhere."""
        own = settings()
        return cls(own.pod_name, own.pod_uid) if own.pod_name and own.pod_uid else None


def task_image(task: Task, default_image: str) -> str:
    """The image a task's pod runs: its ``docker_image``, else (plain files) the deployment's own."""
    return task.config.environment.docker_image or default_image


def task_workdir(task: Task) -> str:
    """The working directory, where the fork is mounted: an absolute path that hides none of the image's system."""
    workdir = task.config.environment.workdir or DEFAULT_WORKDIR
    path = PurePosixPath(workdir)
    covered = any(path.is_relative_to(r) for r in (*_RESERVED, *SCRATCH_MOUNTS.values()))
    if not path.is_absolute() or ".." in path.parts or path == PurePosixPath("/") or covered:
        raise ValueError(f"[environment] workdir {workdir!r}: must be an absolute path outside the system directories")
    return str(path)


def wants_internet(task: Task) -> bool:
    """Only an explicit ``network_mode = "public"`` (or ``allow_internet = true``) opens the network."""
    return task.config.environment.network_mode == "public"


def task_resources(task: Task) -> dict[str, Any]:
    """Requests equal to limits (what the task asked for is what it gets), Harbor's defaults where unset."""
    env = task.config.environment
    amounts = {
        "cpu": str(env.cpus or DEFAULT_CPUS),
        "memory": f"{env.memory_mb or DEFAULT_MEMORY_MB}Mi",
        "ephemeral-storage": f"{env.storage_mb or DEFAULT_STORAGE_MB}Mi",
    }
    return {"requests": dict(amounts), "limits": dict(amounts)}


def task_pod(
    *,
    experiment: str,
    trial_id: str,
    attempt: int,
    task: Task,
    fork_claim: str,
    image: str,
    deadline_s: float,
    owner: PodOwner | None,
) -> dict[str, Any]:
    """The manifest of one attempt's task pod on its fork (see the module's docstring for what it is)."""
    workdir = task_workdir(task)
    labels = {
        "app.kubernetes.io/part-of": "rl-assets",
        TIER_LABEL: TASK_TIER,
        OWNER_LABEL: owner_value(experiment, trial_id),
    }
    if wants_internet(task):
        labels[NETWORK_LABEL] = "internet"
    metadata: dict[str, Any] = {
        "name": task_pod_name(experiment, trial_id, attempt),
        "labels": labels,
        "annotations": {
            EXPERIMENT_ANNOTATION: experiment,
            TRIAL_ANNOTATION: trial_id,
            ATTEMPT_ANNOTATION: str(attempt),
        },
    }
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner.name, "uid": owner.uid}]
    deadline = max(1, math.ceil(deadline_s))
    env = [{"name": name, "value": value} for name, value in task.config.environment.env.items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": deadline,
            "serviceAccountName": ROLLOUT_SERVICE_ACCOUNT,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security_context(),
            "containers": [
                {
                    "name": TASK_CONTAINER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", str(deadline)],
                    "workingDir": workdir,
                    "env": [{"name": "HOME", "value": "/tmp"}, *env],
                    "resources": task_resources(task),
                    "securityContext": container_security_context(),
                    "volumeMounts": [
                        {"name": "fork", "mountPath": workdir},
                        *({"name": name, "mountPath": path} for name, path in SCRATCH_MOUNTS.items()),
                    ],
                }
            ],
            "volumes": [
                {"name": "fork", "persistentVolumeClaim": {"claimName": fork_claim}},
                *({"name": name, "emptyDir": {}} for name in SCRATCH_MOUNTS),
            ],
        },
    }
