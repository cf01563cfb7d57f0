"""Kubernetes names and labels for worlds, forks and rollout pods, derived, never random.

A name that is a pure function of (experiment, trial, attempt) is what makes
the lifecycle idempotent: a retried attempt, or a driver that restarts after a
crash, computes the same names and so finds (and removes) whatever a killed
attempt left behind. Object names must be DNS-1123 labels (at most 63
characters) and label values at most 63 characters, while experiment names
and trial ids are free text, so every name is a readable slug plus a hash of
the exact inputs: two inputs that slug alike still get different names.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 63
TIER_LABEL = "rl-assets/tier"
OWNER_LABEL = "rl-assets/owner"
"""Hash of (experiment, trial): selects every object of one trial, whatever its attempt."""
DRIVER_LABEL = "rl-assets/driver"
"""The process that drives a rollout pod (a random id per world store): it lists all its pods' phases at once."""
NETWORK_LABEL = "rl-assets/network"
"""``internet`` on a task pod whose task asks for the network (deploy/k8s/networkpolicy-tasks.yaml)."""
WORLD_LABEL = "rl-assets/world"
"""Hash of the world id: selects the objects of one world."""
EXPERIMENT_ANNOTATION = "rl-assets/experiment"
TRIAL_ANNOTATION = "rl-assets/trial"
ATTEMPT_ANNOTATION = "rl-assets/attempt"
WORLD_ANNOTATION = "rl-assets/world-id"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def _name(prefix: str, readable: str, digest: str, suffix: str = "") -> str:
    room = MAX_NAME - len(prefix) - len(digest) - len(suffix) - 2
    slug = re.sub(r"[^a-z0-9]+", "-", readable.lower()).strip("-")[:room].strip("-")
    return "-".join(p for p in (prefix, slug, digest) if p) + suffix


def owner_value(experiment: str, trial_id: str) -> str:
    """The owner label value shared by all attempts of one trial."""
    return _digest("trial", experiment, trial_id)


def world_value(world_id: str) -> str:
    return _digest("world", world_id)


WORLD_VOLUME = "world"
"""The world build's volume in its run worker pod: a generic ephemeral volume, see ``world_build_claim_name``."""


def world_build_claim_name(pod_name: str) -> str:
    """The PVC Kubernetes creates for the world build pod's ephemeral volume (``<pod>-<volume>``, by the API's rule).

    The ephemeral-volume controller creates and deletes it with the pod, so no
    account of ours needs the right to create a world's PVC before its build
    pod exists; the snapshot taken from it is what outlives the build.
    """
    return f"{pod_name}-{WORLD_VOLUME}"


def world_snapshot_name(world_id: str) -> str:
    """The VolumeSnapshot of the sealed world that every fork of it is cloned from."""
    return _name("world", world_id, world_value(world_id), "-sealed")


def fork_claim_name(experiment: str, trial_id: str, attempt: int) -> str:
    """The per-attempt PVC cloned from the world's snapshot."""
    return _name("fork", f"{experiment}-{trial_id}", owner_value(experiment, trial_id), f"-a{attempt}")


def rollout_pod_name(experiment: str, trial_id: str, attempt: int) -> str:
    """The pod that runs one attempt's rollout on its fork."""
    return _name("rollout", f"{experiment}-{trial_id}", owner_value(experiment, trial_id), f"-a{attempt}")


def task_pod_name(experiment: str, trial_id: str, attempt: int) -> str:
    """The pod a task trial's attempt runs its commands and its verifier in, on its fork."""
    return _name("task", f"{experiment}-{trial_id}", owner_value(experiment, trial_id), f"-a{attempt}")
