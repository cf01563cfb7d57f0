"""Worlds on Kubernetes: a world's VolumeSnapshot, and one PVC cloned from it per attempt.

The world is written once into its build pod's ephemeral PVC, then snapshotted; the snapshot is
immutable, so it is the seal. Every rollout attempt gets a fresh PVC cloned
from it (CSI ``dataSource``): O(1) for copy-on-write drivers, never shared
between attempts, so a retry never sees what a failed attempt wrote. The fork
is deleted when the attempt ends, also when it fails, and a fork left by a
killed attempt is found by its owner label and deleted before the next one is
created. Only the official ``kubernetes`` client is used; dagster-k8s has no
PVC or snapshot helpers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rl_assets.domain.waiting import Waiting
from rl_assets.kubernetes.names import (
    ATTEMPT_ANNOTATION,
    EXPERIMENT_ANNOTATION,
    OWNER_LABEL,
    TRIAL_ANNOTATION,
    WORLD_ANNOTATION,
    WORLD_LABEL,
    fork_claim_name,
    owner_value,
    world_snapshot_name,
    world_value,
)

SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
SNAPSHOT_VERSION = "v1"
SNAPSHOT_PLURAL = "volumesnapshots"
COMPONENT_LABEL = "app.kubernetes.io/component"
PART_OF_LABEL = "app.kubernetes.io/part-of"


class WorldNotSealedError(RuntimeError):
    """A fork was asked of a world whose snapshot does not exist or failed."""


def _absent(err: ApiException) -> bool:
    return err.status == 404


class WorldVolumes:
    """Creates the world snapshots and creates and deletes the per-attempt forks in one namespace."""

    def __init__(
        self,
        core: client.CoreV1Api,
        custom: client.CustomObjectsApi,
        namespace: str,
        storage_class: str,
        snapshot_class: str,
        fork_size: str | None = None,
        waiting: Waiting | None = None,
    ) -> None:
        self._core = core
        self._custom = custom
        self.namespace = namespace
        self.storage_class = storage_class
        self.snapshot_class = snapshot_class
        self.fork_size = fork_size
        """Size of a fork when the snapshot reports no ``restoreSize`` (the field is optional in the API)."""
        self._waiting = waiting or Waiting()

    def snapshot(self, world_id: str, source_claim: str) -> str:
        """Snapshot the built world's PVC ``source_claim`` (once; idempotent) and wait until it can be restored.

        A snapshot of this world left by an earlier build attempt is kept if it
        became ready (the build is deterministic, and the snapshot is only taken
        after a complete build); one from another claim that is not ready may
        never become so (its pod, and with it that claim, is gone), so it is
        deleted and taken again from this build's claim.
        """
        name = world_snapshot_name(world_id)
        body = {
            "apiVersion": f"{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}",
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": name,
                "labels": {PART_OF_LABEL: "rl-assets", COMPONENT_LABEL: "world", WORLD_LABEL: world_value(world_id)},
                "annotations": {WORLD_ANNOTATION: world_id},
            },
            "spec": {
                "volumeSnapshotClassName": self.snapshot_class,
                "source": {"persistentVolumeClaimName": source_claim},
            },
        }
        if not self._create_snapshot(body):
            existing = self._snapshot(name)
            source = (existing or {}).get("spec", {}).get("source", {}).get("persistentVolumeClaimName")
            if existing is not None and source != source_claim and not existing.get("status", {}).get("readyToUse"):
                self._delete_snapshot(name)
                self._waiting.until(f"stale VolumeSnapshot {name} deleted", lambda: self._snapshot(name) is None)
                self._create_snapshot(body)
        self._waiting.until(f"VolumeSnapshot {name} ready to use", lambda: self._ready_size(name) is not None)
        return name

    def _create_snapshot(self, body: dict[str, Any]) -> bool:
        """Create the snapshot; ``False`` if one of that name exists already."""
        try:
            self._custom.create_namespaced_custom_object(
                SNAPSHOT_GROUP, SNAPSHOT_VERSION, self.namespace, SNAPSHOT_PLURAL, body
            )
        except ApiException as err:
            if err.status != 409:
                raise
            return False
        return True

    def _snapshot(self, name: str) -> dict[str, Any] | None:
        try:
            return self._custom.get_namespaced_custom_object(
                SNAPSHOT_GROUP, SNAPSHOT_VERSION, self.namespace, SNAPSHOT_PLURAL, name
            )
        except ApiException as err:
            if _absent(err):
                return None
            raise

    def _delete_snapshot(self, name: str) -> None:
        try:
            self._custom.delete_namespaced_custom_object(
                SNAPSHOT_GROUP, SNAPSHOT_VERSION, self.namespace, SNAPSHOT_PLURAL, name
            )
        except ApiException as err:
            if not _absent(err):
                raise

    @contextmanager
    def fork(self, experiment: str, trial_id: str, attempt: int, world_id: str) -> Iterator[str]:
        """A PVC cloned from the world's snapshot for one attempt, Bound; yields its name, deletes it after."""
        name = fork_claim_name(experiment, trial_id, attempt)
        owner = owner_value(experiment, trial_id)
        self._remove_leftovers(owner, name)
        snapshot = world_snapshot_name(world_id)
        size = self._ready_size(snapshot)
        if size is None:
            raise WorldNotSealedError(f"world {world_id} has no ready snapshot {snapshot}; seal it first")
        body = client.V1PersistentVolumeClaim(
            api_version="v1",
            kind="PersistentVolumeClaim",
            metadata=client.V1ObjectMeta(
                name=name,
                labels={
                    PART_OF_LABEL: "rl-assets",
                    COMPONENT_LABEL: "fork",
                    OWNER_LABEL: owner,
                    WORLD_LABEL: world_value(world_id),
                },
                annotations={
                    EXPERIMENT_ANNOTATION: experiment,
                    TRIAL_ANNOTATION: trial_id,
                    ATTEMPT_ANNOTATION: str(attempt),
                    WORLD_ANNOTATION: world_id,
                },
            ),
            spec=self._claim_spec(
                size,
                data_source=client.V1TypedLocalObjectReference(
                    api_group=SNAPSHOT_GROUP, kind="VolumeSnapshot", name=snapshot
                ),
            ),
        )
        try:
            self._core.create_namespaced_persistent_volume_claim(self.namespace, body)
            self._waiting.until(f"fork {name} Bound", lambda: self._phase(name) == "Bound")
            yield name
        finally:
            self._delete_claim(name)

    def _claim_spec(
        self, size: str, data_source: client.V1TypedLocalObjectReference
    ) -> client.V1PersistentVolumeClaimSpec:
        return client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            storage_class_name=self.storage_class,
            volume_mode="Filesystem",
            resources=client.V1VolumeResourceRequirements(requests={"storage": size}),
            data_source=data_source,
        )

    def _remove_leftovers(self, owner: str, name: str) -> None:
        """Delete every fork of this trial still present: each was left by a killed attempt.

        Attempts of one trial never overlap, so none of them is in use by a live
        attempt. A leftover with the very name about to be created (the same
        attempt, re-run after its process died) must be gone before the create.
        """
        leftovers = self._core.list_namespaced_persistent_volume_claim(
            self.namespace, label_selector=f"{OWNER_LABEL}={owner}"
        )
        for claim in leftovers.items:
            self._delete_claim(claim.metadata.name)
            if claim.metadata.name == name:
                self._waiting.until(f"leftover fork {name} deleted", lambda: self._phase(name) is None)

    def _delete_claim(self, name: str) -> None:
        try:
            self._core.delete_namespaced_persistent_volume_claim(name, self.namespace)
        except ApiException as err:
            if not _absent(err):
                raise

    def _phase(self, name: str) -> str | None:
        """The claim's phase, or ``None`` when it does not exist."""
        try:
            claim = self._core.read_namespaced_persistent_volume_claim(name, self.namespace)
        except ApiException as err:
            if _absent(err):
                return None
            raise
        return claim.status.phase if claim.status else None

    def _ready_size(self, snapshot: str) -> str | None:
        """The snapshot's restore size once it is ready to use; ``None`` while it is not (or is absent)."""
        obj = self._snapshot(snapshot)
        if obj is None:
            return None
        status = obj.get("status") or {}
        if status.get("error"):
            message = status["error"].get("message", "no message")
            raise WorldNotSealedError(f"VolumeSnapshot {snapshot} failed: {message}")
        if not status.get("readyToUse"):
            return None
        size = status.get("restoreSize") or self.fork_size
        if size is None:
            raise WorldNotSealedError(f"VolumeSnapshot {snapshot} reports no restoreSize and no fork_size is set")
        return size
