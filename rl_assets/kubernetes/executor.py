"""The ``k8s_job_executor`` for rl-assets' jobs: one pod per step, configured per tier.

Which configuration reaches a step pod in dagster-k8s 0.29.27
(``K8sStepHandler._get_container_context``, dagster_k8s/executor.py:256-278):
the run launcher's ``run_k8s_config`` (Helm ``runK8sConfig``), then the op's
``dagster-k8s/config`` tag, then the executor's ``per_step_k8s_config[op
name]``; run-level tags are left out (``include_run_tags=False``, line 262).
The per-tier configs here are the same for every trial, so they are baked into
the executor as ``per_step_k8s_config``: no asset definition has to change,
and nothing per trial has to reach a step pod, because the per-trial fork is
mounted into the rollout pod that the trial step launches, not into the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster_k8s import k8s_job_executor

from rl_assets.kubernetes.pod_specs import (
    SecretKey,
    judge_step_k8s_config,
    train_step_k8s_config,
    trial_step_k8s_config,
)

TRAJECTORIES_OP = "trajectories"
REWARDS_OP = "rewards"
WEIGHTS_OP = "weights"


@dataclass(frozen=True)
class K8sSettings:
    """Where steps run and where the judge's key and the Ray token live (deploy/k8s/secrets-template.yaml)."""

    namespace: str = "rl-assets"
    judge_key: SecretKey = SecretKey(name="rl-assets-judge", key="api-key")
    ray_token: SecretKey = SecretKey(name="rl-assets-ray-auth", key="auth_token")
    """The key name is KubeRay's (``RAY_AUTH_TOKEN_SECRET_KEY``), so the RayCluster's ``authOptions`` reads it too."""
    max_concurrent: int = 64
    """Pods one run may have at once; a trial run has two steps, so this only guards a wide backfill run."""


def executor_config(settings: K8sSettings) -> dict[str, Any]:
    """The ``k8s_job_executor`` config: namespace, per-run pod limit and one ``dagster-k8s/config`` per tier."""
    return {
        "job_namespace": settings.namespace,
        "max_concurrent": settings.max_concurrent,
        "per_step_k8s_config": {
            TRAJECTORIES_OP: trial_step_k8s_config(),
            REWARDS_OP: judge_step_k8s_config(settings.judge_key),
            WEIGHTS_OP: train_step_k8s_config(settings.ray_token),
        },
    }


def k8s_executor(settings: K8sSettings) -> dg.ExecutorDefinition:
    """The executor for ``trial_job``, ``judge_job`` and ``train_job`` on Kubernetes."""
    return k8s_job_executor.configured(executor_config(settings), name="rl_assets_k8s")
