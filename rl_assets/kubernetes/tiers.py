"""Resource and time budgets per tier of pod.

A tier is a kind of pod with its own threat model and cost: the rollout pod
runs the untrusted agent, the trial step drives it (fork, pod, wait), the
judge step calls the paid API, the train step only talks to the Ray cluster
(the training compute is the RayCluster's own). Each tier gets requests (what
the scheduler reserves), limits (what a runaway pod can take) and a deadline
(``activeDeadlineSeconds``: the kubelet kills a pod that runs longer, which
bounds a hung rollout even if every process watching it has died).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Tier:
    """One tier's label value, container resources and pod deadline."""

    name: str
    cpu_request: str
    memory_request: str
    cpu_limit: str
    memory_limit: str
    deadline_s: int

    def resources(self) -> dict[str, Any]:
        """``resources`` of the tier's container, as a Kubernetes manifest writes it."""
        return {
            "requests": {"cpu": self.cpu_request, "memory": self.memory_request},
            "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit},
        }


ROLLOUT = Tier(
    "rollout", cpu_request="250m", memory_request="256Mi", cpu_limit="1", memory_limit="512Mi", deadline_s=600
)
TRIAL = Tier(
    "trial", cpu_request="100m", memory_request="256Mi", cpu_limit="500m", memory_limit="512Mi", deadline_s=1200
)
"""Outlives its rollout pod's deadline by the time a fork takes to clone and bind."""
JUDGE = Tier(
    "judge", cpu_request="100m", memory_request="256Mi", cpu_limit="500m", memory_limit="512Mi", deadline_s=600
)
TRAIN = Tier("train", cpu_request="100m", memory_request="256Mi", cpu_limit="500m", memory_limit="1Gi", deadline_s=1800)
TRIAL_BATCH = Tier(
    "trial", cpu_request="250m", memory_request="512Mi", cpu_limit="2", memory_limit="2Gi", deadline_s=3600
)
"""A rollout run's worker (``rollout_pods_job``): it drives a batch of trials, each in a thread, each attempt's
sandbox a rollout pod with its own deadline; its own deadline bounds the batch. The trial tier's label, so the
same NetworkPolicy applies (the API server and Postgres, nothing else)."""
JUDGE_BATCH = Tier(
    "judge", cpu_request="250m", memory_request="512Mi", cpu_limit="1", memory_limit="1Gi", deadline_s=3600
)
"""A judge-only rollout run's worker (``rollout_job``): it judges a batch's stored trajectories, at most the
``judge`` pool's limit at once. The judge tier's label and NetworkPolicy."""
