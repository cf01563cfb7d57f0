"""The container runtime the container tests use, with the base images their tasks name.

Real Podman (or Docker): optional locally (skipped naming the install command), required in CI. No registry is
reachable here, so the base the examples name, ``debian:bookworm-slim``, is made locally once (``mmdebstrap``)
and imported under that name when the runtime does not have it; a base a foreign task names (Harbor's
``ubuntu:24.04``) is that image under the other name when the runtime has no image of that name.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from system_components import require_component

from rl_assets.containers.runtime import ContainerRuntime, ContainerRuntimeUnavailable, container_runtime
from rl_assets.containers.sessions import WORKER_LABEL

BASE = "docker.io/library/debian:bookworm-slim"
INSTALL = "apt-get install podman runc mmdebstrap"


def runtime_with_base(*aliases: str) -> ContainerRuntime:
    """The runtime, with :data:`BASE` (made if absent) and each of ``aliases`` (tagged from it if absent)."""
    try:
        runtime = container_runtime()
    except ContainerRuntimeUnavailable as err:
        require_component("podman", False, INSTALL, str(err))
    if not _has(runtime, BASE):
        require_component("mmdebstrap", shutil.which("mmdebstrap") is not None, INSTALL, "to make the base image")
        with tempfile.TemporaryDirectory() as scratch:
            rootfs = Path(scratch) / "rootfs.tar"
            subprocess.run(["mmdebstrap", "--variant=minbase", "bookworm", str(rootfs)], check=True, timeout=900)
            runtime.run(["import", str(rootfs), BASE], timeout_s=600)
    for alias in aliases:
        if not _has(runtime, alias):
            runtime.run(["tag", BASE, alias], timeout_s=60)
    return runtime


def _has(runtime: ContainerRuntime, image: str) -> bool:
    return runtime.run(["image", "inspect", image], timeout_s=60, check=False).returncode == 0


def task_containers(runtime: ContainerRuntime) -> list[str]:
    """The task containers present (every one rl-assets starts carries its worker's label)."""
    proc = runtime.run(["ps", "-a", "--filter", f"label={WORKER_LABEL}", "--format", "{{.Names}}"], timeout_s=60)
    return proc.stdout.decode().split()
