"""A fake Kubernetes API server on loopback, for the real ``kubernetes`` client.

It serves the PVC, VolumeSnapshot and Pod endpoints the world volumes and the
rollout pods use, checks every created object against its schema (see
:mod:`fakes.k8s_schemas`) and answers 422 for an invalid one, as the real API
server does, records every call, and moves objects through their states
deterministically: a PVC is Bound, a snapshot ready, a pod finished after a
set number of reads, and a deleted object is gone after a set number more.
Nothing is timed, so tests never sleep.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from fakes.k8s_schemas import SchemaViolation, validate
from kubernetes import client

_ROUTE = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?P<log>/log)?$"
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
            if method == "GET" and match["log"]:
                return 200, self.pod_script.log
            if method == "GET":
                stored.reads += 1
                self._advance(kind, stored)
                return 200, stored.obj
            if method == "DELETE":
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
        return 201, obj

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
        if kind == "Pod" and stored.reads >= self.reads_until_pod_finished:
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
                items.append(stored.obj)
        return {"apiVersion": api_version, "kind": f"{kind}List", "metadata": {}, "items": items}


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

        do_GET = do_POST = do_DELETE = _serve

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
