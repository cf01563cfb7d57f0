"""Pod configuration per tier: the rollout pod, and the ``dagster-k8s/config`` of each Dagster step.

Why the rollout is its own pod and not the ``trajectories`` step pod: a Dagster
step pod runs Dagster's step worker, which writes every event to Postgres, so
dagster-k8s gives it the Postgres password as an env var
(``construct_dagster_k8s_job``, dagster_k8s/job.py:872-884) and it needs
network egress to the database. A pod with no egress and no secrets therefore
cannot be a Dagster step. So the ``trajectories`` step (tier ``trial``) clones
the fork and launches a separate rollout pod (tier ``rollout``) that runs only
the sandbox runner: no Dagster, no secret, no service-account token, no
network (``deploy/k8s/networkpolicy-rollout.yaml``), read-only root, non-root,
its fork mounted at :data:`FORK_MOUNT`. It returns its rollout on stdout,
which the trial step reads through the pod-log API.

Step configs are the raw ``dagster-k8s/config`` dicts that
:mod:`rl_assets.kubernetes.executor` puts into the executor's
``per_step_k8s_config``; world builds use :func:`world_build_k8s_config` as a
run tag, which dagster-k8s applies to the run worker pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rl_assets.home.settings import POD_NAME_ENV, POD_UID_ENV
from rl_assets.kubernetes.names import (
    ATTEMPT_ANNOTATION,
    DRIVER_LABEL,
    EXPERIMENT_ANNOTATION,
    OWNER_LABEL,
    TIER_LABEL,
    TRIAL_ANNOTATION,
    WORLD_ANNOTATION,
    WORLD_LABEL,
    WORLD_VOLUME,
    owner_value,
    rollout_pod_name,
    world_value,
)
from rl_assets.kubernetes.tiers import JUDGE, JUDGE_BATCH, ROLLOUT, TRAIN, TRIAL, TRIAL_BATCH, Tier

USER_DEFINED_K8S_CONFIG_TAG = "dagster-k8s/config"
FORK_MOUNT = "/world"
"""Where the rollout pod sees its fork (a writable clone; the sealed world is never mounted)."""
WORLD_MOUNT = "/world"
"""Where the world build writes the world into its ephemeral volume."""
RUNTIME_UID = 10001
"""The image's non-root user (deploy/Dockerfile)."""
ROLLOUT_CONTAINER = "rollout"
ROLLOUT_SERVICE_ACCOUNT = "rl-assets-rollout"
"""An account bound to no Role; its token is not mounted either."""
RUNNER_SERVICE_ACCOUNT = "rl-assets-runner"
"""The run and step pods' account (deploy/k8s/rbac.yaml): the only one that may create rollout pods, PVCs and
VolumeSnapshots. Set here as well as in the Helm values so a step pod never falls back to another account."""
REQUEST_ENV = "RL_ASSETS_SANDBOX_REQUEST"
ROLLOUT_COMMAND = ("/bin/sh", "-c", f'printf "%s" "${REQUEST_ENV}" | python -m rl_assets.sandbox.runner')
"""The runner reads its request on stdin; a pod has none, so the request comes as an env var and is piped in."""
JUDGE_KEY_ENV = "RL_ASSETS_JUDGE_API_KEY"
RAY_AUTH_MODE_ENV = "RAY_AUTH_MODE"
RAY_AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
"""Ray 2.60's token authentication: with ``RAY_AUTH_MODE=token`` every Ray gRPC server (GCS, raylet, the
``ray://`` client server) and HTTP agent refuses a caller without this token, and a client sends it
(``ray/_private/authentication``; KubeRay's ``authOptions`` injects the same two variables)."""


@dataclass(frozen=True)
class SecretKey:
    """One key of a Kubernetes Secret: what an env var's ``secretKeyRef`` points at."""

    name: str
    key: str


def container_security_context() -> dict[str, Any]:
    """Non-root, no privilege escalation, no capabilities, nothing written outside the mounted volumes."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_UID,
        "runAsGroup": RUNTIME_UID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context() -> dict[str, Any]:
    """``fsGroup`` makes the mounted PVCs writable by the non-root user."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_UID,
        "runAsGroup": RUNTIME_UID,
        "fsGroup": RUNTIME_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _scratch_volume() -> dict[str, Any]:
    return {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}


def _scratch_mount() -> dict[str, Any]:
    return {"name": "tmp", "mountPath": "/tmp"}


def step_k8s_config(
    tier: Tier,
    *,
    mount_token: bool,
    env: tuple[Mapping[str, Any], ...] = (),
    volumes: tuple[Mapping[str, Any], ...] = (),
    volume_mounts: tuple[Mapping[str, Any], ...] = (),
) -> dict[str, Any]:
    """The ``dagster-k8s/config`` of one Dagster step pod of ``tier``.

    ``mount_token`` only for steps that call the Kubernetes API themselves;
    the step worker does not need it to report to Dagster (that goes to Postgres).
    """
    return {
        "container_config": {
            "resources": tier.resources(),
            "securityContext": container_security_context(),
            "env": [{"name": "HOME", "value": "/tmp"}, *env],
            "volumeMounts": [_scratch_mount(), *volume_mounts],
        },
        "pod_spec_config": {
            "activeDeadlineSeconds": tier.deadline_s,
            "serviceAccountName": RUNNER_SERVICE_ACCOUNT,
            "automountServiceAccountToken": mount_token,
            "enableServiceLinks": False,
            "securityContext": pod_security_context(),
            "volumes": [_scratch_volume(), *volumes],
        },
        "pod_template_spec_metadata": {"labels": {TIER_LABEL: tier.name}},
    }


def _own_field_env(name: str, field: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field}}}


def trial_step_k8s_config() -> dict[str, Any]:
    """The ``trajectories`` step: it clones the fork and runs the rollout or task pod, so it needs its token.

    It knows its own pod's name and uid, so a task pod it starts is owned by it (garbage-collected with it).
    """
    own = (_own_field_env(POD_NAME_ENV, "metadata.name"), _own_field_env(POD_UID_ENV, "metadata.uid"))
    return step_k8s_config(TRIAL, mount_token=True, env=own)


def _secret_env(name: str, secret: SecretKey) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}}


def judge_step_k8s_config(judge_key: SecretKey) -> dict[str, Any]:
    """The ``rewards`` step: the judge's API key from the Secret by reference, never as a value."""
    return step_k8s_config(JUDGE, mount_token=False, env=(_secret_env(JUDGE_KEY_ENV, judge_key),))


def rollout_batch_k8s_config() -> dict[str, Any]:
    """The run worker of a ``rollout_pods_job`` run, as the ``trajectories`` step's pod for a batch of trials:
    the token (it clones forks and starts rollout and task pods), its own name and uid, no judge key."""
    own = (_own_field_env(POD_NAME_ENV, "metadata.name"), _own_field_env(POD_UID_ENV, "metadata.uid"))
    return step_k8s_config(TRIAL_BATCH, mount_token=True, env=own)


def judge_batch_k8s_config(judge_key: SecretKey) -> dict[str, Any]:
    """The run worker of a judge-only ``rollout_job`` run, as the ``rewards`` step's pod for a batch: the judge's
    key by reference, no token."""
    return step_k8s_config(JUDGE_BATCH, mount_token=False, env=(_secret_env(JUDGE_KEY_ENV, judge_key),))


def train_step_k8s_config(ray_token: SecretKey) -> dict[str, Any]:
    """The ``weights`` step: the RayCluster's only client, authenticated by the cluster's token from its Secret.

    No Kubernetes API, no judge key. The token reaches only this tier; the
    NetworkPolicy lets only this tier reach the Ray head's client port.
    """
    ray_env = ({"name": RAY_AUTH_MODE_ENV, "value": "token"}, _secret_env(RAY_AUTH_TOKEN_ENV, ray_token))
    return step_k8s_config(TRAIN, mount_token=False, env=ray_env)


def world_build_k8s_config(world_id: str, storage_class: str, size: str) -> dict[str, Any]:
    """Give the run worker that builds the world (``world_job`` runs in process) a fresh volume for it.

    A generic ephemeral volume: Kubernetes creates its PVC with the pod and
    deletes it with the pod, so nobody creates a PVC before the pod exists (the
    driver sensor, in the code server, needs no Kubernetes rights). The build
    snapshots it, and forks are cloned from the snapshot, never from this PVC.
    Set as the run's :data:`USER_DEFINED_K8S_CONFIG_TAG` tag (see :func:`world_build_tags`):
    dagster-k8s applies run tags to the run worker pod only, which is where an
    in-process job's step runs, and a world is per run, so op tags cannot carry it.
    """
    claim_template = {
        "metadata": {
            "labels": {"app.kubernetes.io/part-of": "rl-assets", WORLD_LABEL: world_value(world_id)},
            "annotations": {WORLD_ANNOTATION: world_id},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
    }
    pod_name = _own_field_env(POD_NAME_ENV, "metadata.name")
    return {
        "container_config": {"env": [pod_name], "volumeMounts": [{"name": WORLD_VOLUME, "mountPath": WORLD_MOUNT}]},
        "pod_spec_config": {"volumes": [{"name": WORLD_VOLUME, "ephemeral": {"volumeClaimTemplate": claim_template}}]},
    }


def batch_run_tags(judge_only: bool, judge_key: SecretKey) -> dict[str, str]:
    """The run tags of a rollout run: its worker pod is a batch's ``trajectories`` step (rolling out) or
    ``rewards`` step (judging), never both, so the token and the judge's key are never in one pod."""
    config = judge_batch_k8s_config(judge_key) if judge_only else rollout_batch_k8s_config()
    return {USER_DEFINED_K8S_CONFIG_TAG: json.dumps(config)}


def world_build_tags(world_id: str, storage_class: str, size: str) -> dict[str, str]:
    """The run tags of one world's ``world_job`` run."""
    return {USER_DEFINED_K8S_CONFIG_TAG: json.dumps(world_build_k8s_config(world_id, storage_class, size))}


def rollout_pod(
    *,
    experiment: str,
    trial_id: str,
    attempt: int,
    fork_claim: str,
    image: str,
    request_json: str,
    tier: Tier = ROLLOUT,
    driver: str | None = None,
) -> dict[str, Any]:
    """The manifest of one attempt's rollout pod, on the attempt's fork.

    Its only env is the (secret-free) sandbox request and ``HOME``; values are
    plain strings by construction, so no Secret can reach it. ``driver`` labels
    it with the process that waits on it (:class:`~rl_assets.kubernetes.rollouts.PodPhases`).
    """
    labels = {
        "app.kubernetes.io/part-of": "rl-assets",
        TIER_LABEL: tier.name,
        OWNER_LABEL: owner_value(experiment, trial_id),
    }
    if driver is not None:
        labels[DRIVER_LABEL] = driver
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": rollout_pod_name(experiment, trial_id, attempt),
            "labels": labels,
            "annotations": {
                EXPERIMENT_ANNOTATION: experiment,
                TRIAL_ANNOTATION: trial_id,
                ATTEMPT_ANNOTATION: str(attempt),
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": tier.deadline_s,
            "serviceAccountName": ROLLOUT_SERVICE_ACCOUNT,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security_context(),
            "containers": [
                {
                    "name": ROLLOUT_CONTAINER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": list(ROLLOUT_COMMAND),
                    "workingDir": FORK_MOUNT,
                    "env": [
                        {"name": REQUEST_ENV, "value": request_json},
                        {"name": "HOME", "value": "/tmp"},
                        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                    ],
                    "resources": tier.resources(),
                    "securityContext": container_security_context(),
                    "volumeMounts": [{"name": "fork", "mountPath": FORK_MOUNT}, _scratch_mount()],
                }
            ],
            "volumes": [{"name": "fork", "persistentVolumeClaim": {"claimName": fork_claim}}, _scratch_volume()],
        },
    }
