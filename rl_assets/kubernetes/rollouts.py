"""Run one rollout pod to completion and read what it printed.

The trial step creates the pod, waits until it has succeeded or failed (a
hung one is failed by the kubelet at its ``activeDeadlineSeconds``), reads its
log through the API (the pod has no network, so this is its only way out) and
deletes it, also when anything here fails. Attempts of one trial never
overlap, so a rollout pod of the same trial still present was left by a killed
attempt and is deleted first.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rl_assets.domain.waiting import Waiting
from rl_assets.kubernetes.names import DRIVER_LABEL, OWNER_LABEL
from rl_assets.kubernetes.pod_specs import ROLLOUT_CONTAINER

FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class PodOutcome:
    """How a rollout pod ended and what it wrote to stdout/stderr."""

    phase: str
    exit_code: int | None
    reason: str | None
    """The pod's or container's reason, e.g. ``DeadlineExceeded`` or ``OOMKilled``."""
    log: str


class PodPhases:
    """The phases of one process's rollout pods (labelled with its ``driver`` id), read for all of them by one
    LIST at most every ``interval_s``, whichever of its threads asks.

    A rollout run's worker waits on hundreds of pods at once: a GET per pod per poll was that many requests
    a second to the API server, and as many responses for the worker to parse.
    """

    def __init__(self, core: client.CoreV1Api, namespace: str, driver: str, interval_s: float = 1.0) -> None:
        self._core = core
        self.namespace = namespace
        self.selector = f"{DRIVER_LABEL}={driver}"
        self.interval_s = interval_s
        self._phases: dict[str, str | None] = {}
        self._read_at = -math.inf
        self._lock = threading.Lock()

    def phase(self, name: str, created_at: float) -> str | None:
        """The pod's phase, as listed after ``created_at`` (``time.monotonic()`` once its creation returned);
        ``None`` if it is not there."""
        with self._lock:
            now = time.monotonic()
            if self._read_at <= created_at or now - self._read_at >= self.interval_s:
                pods = self._core.list_namespaced_pod(self.namespace, label_selector=self.selector)
                self._phases = {p.metadata.name: p.status.phase for p in pods.items}
                self._read_at = now
            return self._phases.get(name)


class RolloutPods:
    """Runs rollout pods in one namespace; with ``phases``, waits on them through that shared reader."""

    def __init__(
        self,
        core: client.CoreV1Api,
        namespace: str,
        waiting: Waiting | None = None,
        phases: PodPhases | None = None,
    ) -> None:
        self._core = core
        self.namespace = namespace
        self._waiting = waiting or Waiting()
        self._phases = phases

    def run(self, pod: dict[str, Any]) -> PodOutcome:
        """Create ``pod`` (a manifest from :func:`~rl_assets.kubernetes.pod_specs.rollout_pod`), await its end."""
        name = pod["metadata"]["name"]
        self.remove_leftovers(pod["metadata"]["labels"][OWNER_LABEL], name)
        try:
            self._core.create_namespaced_pod(self.namespace, pod)
            created_at = time.monotonic()  # after: a listing begun later includes the pod
            self._waiting.until(f"rollout pod {name} finished", lambda: self._finished(name, created_at))
            final = self.read(name)
            return _outcome(final, self._log(name))
        finally:
            self.delete(name)

    def _finished(self, name: str, created_at: float) -> bool:
        if self._phases is None:
            return self.read(name).status.phase in FINISHED
        phase = self._phases.phase(name, created_at)
        if phase is None:
            raise RuntimeError(f"rollout pod {name} is gone before it finished")
        return phase in FINISHED

    def _log(self, name: str) -> str:
        """The container's log, decoded here: with its content preloaded, kubernetes 36.0.3 returns a
        ``str`` response as ``str(bytes)`` (``b'...'``, api_client.py:202-213 skips decoding for "str")."""
        response = self._core.read_namespaced_pod_log(
            name, self.namespace, container=ROLLOUT_CONTAINER, _preload_content=False
        )
        return response.data.decode("utf-8", errors="replace")

    def remove_leftovers(self, owner: str, name: str) -> None:
        pods = self._core.list_namespaced_pod(self.namespace, label_selector=f"{OWNER_LABEL}={owner}")
        for leftover in pods.items:
            self.delete(leftover.metadata.name)
            if leftover.metadata.name == name:
                self._waiting.until(f"leftover pod {name} deleted", lambda: not self.exists(name))

    def read(self, name: str) -> client.V1Pod:
        return self._core.read_namespaced_pod(name, self.namespace)

    def exists(self, name: str) -> bool:
        try:
            self.read(name)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def delete(self, name: str) -> None:
        try:
            self._core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as err:
            if err.status != 404:
                raise


def _outcome(pod: client.V1Pod, log: str) -> PodOutcome:
    exit_code, reason = None, pod.status.reason
    for status in pod.status.container_statuses or []:
        terminated = status.state.terminated if status.state else None
        if status.name == ROLLOUT_CONTAINER and terminated is not None:
            exit_code, reason = terminated.exit_code, reason or terminated.reason
    return PodOutcome(phase=pod.status.phase, exit_code=exit_code, reason=reason, log=log)
