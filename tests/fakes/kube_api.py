"""A fake Kubernetes API server on loopback, for the real ``kubernetes`` client.

It serves the PVC, VolumeSnapshot and Pod endpoints the world volumes and the
rollout pods use, checks every created object against its schema (see
:mod:`fakes.k8s_schemas`) and answers 422 for an invalid one, as the real API
server does, records every call, and moves objects through their states
deterministically: a PVC is Bound, a snapshot ready, a pod finished after a
set number of reads (a listing that includes it counts as one), and a deleted
object is gone after a set number more.
Nothing is timed, so tests never sleep.

With ``storage`` set it also stands in for volumes and containers: a snapshot taken of a
PVC keeps a copy of that PVC's directory, a PVC cloned from a snapshot gets a directory holding
the snapshot's contents (``snapshot_contents``), a pod's empty volumes get directories, and the
pods/exec endpoint runs commands in them over the real websocket protocol
(:mod:`fakes.kube_exec`). Pods of the ``running_tiers`` (task pods) go Running and stay so until
deleted.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from fakes import kube_exec
from fakes.k8s_schemas import SchemaViolation, validate
from kubernetes import client

_ROUTE = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?P<sub>/log|/exec)?$"
)
KINDS = {
    ("", "persistentvolumeclaims"): ("v1", "PersistentVolumeClaim"),
    ("", "pods"): ("v1", "Pod"),
    ("snapshot.storage.k8s.io", "volumesnapshots"): ("snapshot.storage.k8s.io/v1", "VolumeSnapshot"),
}


@dataclass(frozen=True)
class Call:
    """One request: verb, resource kind, object name (``None`` for collections) and body."""

    method: str
    kind: str
    name: str | None
    body: dict[str, Any] | None = None


@dataclass
class PodScript:
    """How every rollout pod ends."""

    phase: str = "Succeeded"
    exit_code: int = 0
    reason: str | None = None
    log: str = ""


@dataclass
class _Stored:
    obj: dict[str, Any]
    reads: int = 0
    reads_since_delete: int | None = None


@dataclass
class FakeKubeApi:
    """State and behaviour of the fake server; start it with :func:`serve`."""

    reads_until_bound: int = 1
    reads_until_snapshot_ready: int = 1
    reads_until_pod_finished: int = 1
    reads_until_deleted: int = 0
    """Reads during which a deleted object is still there (Terminating), as with finalizers."""
    bind: bool = True
    """``False``: PVCs stay Pending forever (a StorageClass that cannot provision)."""
    restore_size: str = "1Gi"
    pod_script: PodScript = field(default_factory=PodScript)
    finish_when_pods: int = 0
    """A pod following ``pod_script`` finishes only once this many such pods exist or existed: a test that a
    worker drives that many rollout pods at once (a worker that waited on them one by one never gets there)."""
    pods_created: int = 0
    peak_pods: int = 0
    """The most pods present at once."""
    running_tiers: tuple[str, ...] = ("task",)
    """Pods labelled ``rl-assets/tier`` with one of these run until deleted instead of following ``pod_script``."""
    storage: Path | None = None
    """Where volumes' contents live (see the module docstring); ``None``: no volume contents, no exec."""
    snapshot_contents: dict[str, Path] = field(default_factory=dict)
    """A VolumeSnapshot's name -> the directory a PVC cloned from it starts as a copy of."""
    execs: list[tuple[str, list[str]]] = field(default_factory=list)
    """Every exec: (pod name, command) in order."""
    calls: list[Call] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    objects: dict[tuple[str, str], _Stored] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seed(self, obj: dict[str, Any]) -> None:
        """Put ``obj`` on the server as if an earlier process had created it (validated like a create)."""
        validate(obj)
        self.objects[(obj["kind"], obj["metadata"]["name"])] = _Stored(copy.deepcopy(obj))

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        stored = self.objects.get((kind, name))
        return None if stored is None else stored.obj

    def names(self, kind: str) -> list[str]:
        return sorted(name for k, name in self.objects if k == kind)

    def calls_of(self, method: str, kind: str) -> list[Call]:
        return [c for c in self.calls if c.method == method and c.kind == kind]

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        url = urlparse(path)
        match = _ROUTE.match(url.path)
        if match is None or (match["group"] or "", match["plural"]) not in KINDS:
            return 404, _status(404, "NotFound", f"no route for {url.path}")
        api_version, kind = KINDS[(match["group"] or "", match["plural"])]
        name = match["name"]
        data = json.loads(body) if body else None
        with self.lock:
            self.calls.append(Call(method, kind, name, data))
            if method == "POST" and name is None:
                return self._create(api_version, kind, data)
            if method == "GET" and name is None:
                selector = parse_qs(url.query).get("labelSelector", [""])[0]
                return 200, self._list(api_version, kind, selector)
            stored = self._present(kind, name)
            if stored is None:
                return 404, _status(404, "NotFound", f'{kind} "{name}" not found')
            if method == "GET" and match["sub"] == "/log":
                return 200, self.pod_script.log
            if method == "GET":
                stored.reads += 1
                self._advance(kind, stored)
                return 200, stored.obj
            if method == "DELETE":
                if stored.reads_since_delete is None and self.storage is not None and kind != "VolumeSnapshot":
                    shutil.rmtree(self._volume_dir(kind, name), ignore_errors=True)
                if stored.reads_since_delete is None:
                    stored.reads_since_delete = 0
                    stored.obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                self._present(kind, name)
                return 200, stored.obj
        return 405, _status(405, "MethodNotAllowed", method)

    def _create(self, api_version: str, kind: str, data: dict[str, Any]) -> tuple[int, Any]:
        if data.get("apiVersion") != api_version or data.get("kind") != kind:
            return self._reject(f"body is {data.get('apiVersion')}/{data.get('kind')}, endpoint is {kind}")
        try:
            validate(data)
        except SchemaViolation as err:
            return self._reject(str(err))
        name = data["metadata"]["name"]
        if self._present(kind, name) is not None:
            return 409, _status(409, "AlreadyExists", f'{kind} "{name}" already exists')
        obj = copy.deepcopy(data)
        obj["status"] = {
            "PersistentVolumeClaim": {"phase": "Pending"},
            "VolumeSnapshot": {"readyToUse": False},
            "Pod": {"phase": "Pending"},
        }[kind]
        self.objects[(kind, name)] = _Stored(obj)
        if kind == "Pod":
            self.pods_created += 1
            self.peak_pods = max(
                self.peak_pods,
                sum(1 for (k, _), o in self.objects.items() if k == "Pod" and o.reads_since_delete is None),
            )
        if self.storage is not None:
            self._make_volumes(kind, obj)
        return 201, obj

    def _volume_dir(self, kind: str, name: str) -> Path:
        return self.storage / {"PersistentVolumeClaim": "pvcs", "Pod": "pods"}[kind] / name

    def _make_volumes(self, kind: str, obj: dict[str, Any]) -> None:
        """A snapshot's contents (a copy of its PVC's), a clone's (its snapshot's), or a pod's empty volumes."""
        if kind == "VolumeSnapshot":
            claim = obj["spec"]["source"].get("persistentVolumeClaimName")
            source = self.storage / "pvcs" / claim if claim else None
            if source is not None and source.is_dir():
                contents = self.storage / "snapshots" / obj["metadata"]["name"]
                shutil.copytree(source, contents, symlinks=True)
                self.snapshot_contents[obj["metadata"]["name"]] = contents
            return
        target = self._volume_dir(kind, obj["metadata"]["name"])
        if kind == "PersistentVolumeClaim":
            source = self.snapshot_contents.get((obj["spec"].get("dataSource") or {}).get("name", ""))
            if source is not None:
                shutil.copytree(source, target, symlinks=True)
            target.mkdir(parents=True, exist_ok=True)
        if kind == "Pod":
            for volume in obj["spec"].get("volumes", []):
                if "emptyDir" in volume:
                    (target / volume["name"]).mkdir(parents=True)

    def exec_target(self, path: str) -> tuple[list[str], dict[str, Any], dict[str, Path]] | None:
        """For an exec request: (command, the pod, its volumes' directories); ``None`` if there is no such pod."""
        url = urlparse(path)
        match = _ROUTE.match(url.path)
        if match is None or match["sub"] != "/exec" or self.storage is None:
            return None
        command = parse_qs(url.query).get("command", [])
        with self.lock:
            stored = self._present("Pod", match["name"])
            if stored is None or stored.obj["status"].get("phase") != "Running":
                return None
            pod = copy.deepcopy(stored.obj)
            self.execs.append((match["name"], command))
        volumes = {}
        for volume in pod["spec"].get("volumes", []):
            if "emptyDir" in volume:
                volumes[volume["name"]] = self._volume_dir("Pod", match["name"]) / volume["name"]
            else:
                volumes[volume["name"]] = self._volume_dir(
                    "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]
                )
        return command, pod, volumes

    def _reject(self, message: str) -> tuple[int, Any]:
        self.rejected.append(message)
        return 422, _status(422, "Invalid", message)

    def _present(self, kind: str, name: str) -> _Stored | None:
        """The stored object, unless it was deleted and its Terminating reads are used up."""
        stored = self.objects.get((kind, name))
        if stored is None or stored.reads_since_delete is None:
            return stored
        if stored.reads_since_delete >= self.reads_until_deleted:
            del self.objects[(kind, name)]
            return None
        stored.reads_since_delete += 1
        return stored

    def _advance(self, kind: str, stored: _Stored) -> None:
        status = stored.obj.setdefault("status", {})
        if kind == "PersistentVolumeClaim" and self.bind and stored.reads >= self.reads_until_bound:
            status["phase"] = "Bound"
        if kind == "VolumeSnapshot" and stored.reads >= self.reads_until_snapshot_ready:
            status["readyToUse"] = True
            status.setdefault("restoreSize", self.restore_size)
        tier = stored.obj["metadata"].get("labels", {}).get("rl-assets/tier")
        if kind == "Pod" and tier in self.running_tiers and stored.reads >= self.reads_until_pod_finished:
            container = stored.obj["spec"]["containers"][0]
            status.update(
                phase="Running",
                containerStatuses=[
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    }
                ],
            )
        elif (
            kind == "Pod"
            and stored.reads >= self.reads_until_pod_finished
            and self.pods_created >= self.finish_when_pods
        ):
            script = self.pod_script
            container = stored.obj["spec"]["containers"][0]
            terminated = {"exitCode": script.exit_code, "reason": "Completed" if script.exit_code == 0 else "Error"}
            status.update(
                phase=script.phase,
                containerStatuses=[
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": terminated},
                    }
                ],
            )
            if script.reason:
                status["reason"] = script.reason

    def _list(self, api_version: str, kind: str, selector: str) -> dict[str, Any]:
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
        items = []
        for (k, name), stored in list(self.objects.items()):
            if k != kind or self._present(kind, name) is None:
                continue
            labels = stored.obj["metadata"].get("labels", {})
            if all(labels.get(key) == value for key, value in wanted.items()):
                if kind == "Pod":  # a listing reads each pod, as a GET does: its pod moves on as it would
                    stored.reads += 1
                    self._advance(kind, stored)
                items.append(stored.obj)
        return {"apiVersion": api_version, "kind": f"{kind}List", "metadata": {}, "items": items}


def ready_snapshot(name: str, claim: str) -> dict[str, Any]:
    """A VolumeSnapshot of PVC ``claim``, ready to clone from: a world an earlier build sealed."""
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name},
        "spec": {"source": {"persistentVolumeClaimName": claim}},
        "status": {"readyToUse": True, "restoreSize": "1Gi"},
    }


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "reason": reason,
        "code": code,
        "message": message,
    }


def _handler(api: FakeKubeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            code, payload = api.handle(self.command, self.path, self.rfile.read(length))
            text = isinstance(payload, str)
            data = (payload if text else json.dumps(payload)).encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.headers.get("Upgrade", "").lower() != "websocket":
                self._serve()
                return
            self.close_connection = True
            target = api.exec_target(self.path)
            if target is None:
                self.wfile.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                return
            command, pod, volumes = target
            if kube_exec.handshake(self.headers, self.wfile):
                kube_exec.serve_exec(self.rfile, self.wfile, kube_exec.container_argv(pod, volumes, command))

        do_POST = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            return

    return Handler


@contextmanager
def serve(api: FakeKubeApi) -> Iterator[client.ApiClient]:
    """Serve ``api`` on 127.0.0.1 and yield a real client configured for it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    config = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    api_client = client.ApiClient(config)
    try:
        yield api_client
    finally:
        api_client.close()
        server.shutdown()
        server.server_close()
        thread.join()
