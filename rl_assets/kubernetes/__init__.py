"""rl-assets on Kubernetes: forks as cloned PVCs, rollout pods, per-tier step pods.

Nothing here is imported by the local path; the environment switch picks it.
The pieces, one concept per module:

- :mod:`~rl_assets.kubernetes.names`: deterministic object names and labels;
- :mod:`~rl_assets.kubernetes.tiers`: resources and deadlines per tier of pod;
- :mod:`~rl_assets.kubernetes.volumes`: the world's VolumeSnapshot and per-attempt forks;
- :mod:`~rl_assets.kubernetes.pod_specs`: the rollout pod, each step's and each rollout run's ``dagster-k8s/config``;
- :mod:`~rl_assets.kubernetes.rollouts`: run a rollout pod, read its output, delete it;
- :mod:`~rl_assets.kubernetes.executor`: the configured ``k8s_job_executor``.
"""

from rl_assets.domain.waiting import Waiting
from rl_assets.kubernetes.executor import K8sSettings, executor_config, k8s_executor
from rl_assets.kubernetes.pod_specs import SecretKey, batch_run_tags, rollout_pod, world_build_tags
from rl_assets.kubernetes.rollouts import PodOutcome, RolloutPods
from rl_assets.kubernetes.volumes import WorldNotSealedError, WorldVolumes

__all__ = [
    "K8sSettings",
    "PodOutcome",
    "RolloutPods",
    "SecretKey",
    "Waiting",
    "WorldNotSealedError",
    "WorldVolumes",
    "batch_run_tags",
    "executor_config",
    "k8s_executor",
    "rollout_pod",
    "world_build_tags",
]
