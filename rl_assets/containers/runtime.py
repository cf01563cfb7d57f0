"""Which container runtime runs task containers, and the arguments every call to it carries.

Podman is the default where it is installed: it needs no daemon, runs as root or rootless, and what
it starts belongs to the caller. Docker is used where Podman is absent and a Docker daemon answers.
``RL_ASSETS_CONTAINER_RUNTIME`` (``podman``, ``docker`` or an absolute path to either) chooses one.

Two facts of hosts like this project's CI shape the arguments (measured with Debian's Podman 4.3):

- ``crun``, Podman's preferred OCI runtime, refuses hybrid cgroups; ``runc`` works, so Podman is
  told to use ``runc`` wherever it is installed;
- Podman raises a container's ``nofile``/``nproc`` limits above what a host without
  ``CAP_SYS_RESOURCE`` may grant, and the container then fails to start; explicit limits of 1024
  (which also bound the agent's processes and files) work everywhere.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rl_assets.home.settings import RUNTIME_ENV, settings

INSTALL_HINT = "install Podman (Debian/Ubuntu: apt-get install podman runc; Fedora: dnf install podman)"
PROCESS_LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
"""Every container's (and every build step's) open-file and process limits."""
PROBE_TIMEOUT_S = 30.0

RuntimeKind = Literal["podman", "docker"]


class ContainerRuntimeUnavailable(RuntimeError):
    """No container runtime can run task containers here; the message says what to install."""


@dataclass(frozen=True)
class ContainerRuntime:
    """One container runtime's binary and the global arguments it is always called with."""

    kind: RuntimeKind
    binary: str
    global_args: tuple[str, ...] = ()

    def argv(self, *args: str) -> list[str]:
        """The command line of ``<runtime> <global args> args...``."""
        return [self.binary, *self.global_args, *args]

    def run(
        self, args: Sequence[str], timeout_s: float, stdin: bytes | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run one command of the runtime to its end; :class:`ContainerCommandError` if it fails and ``check``."""
        try:
            proc = subprocess.run(self.argv(*args), input=stdin, capture_output=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise ContainerCommandError(f"{self.kind} {args[0]} did not end within {timeout_s:g}s") from None
        if check and proc.returncode != 0:
            raise ContainerCommandError(f"{self.kind} {args[0]} failed: {tail(proc.stderr or proc.stdout)}")
        return proc


class ContainerCommandError(RuntimeError):
    """A call to the container runtime failed: the attempt (or the build) is over."""


def tail(output: bytes, limit: int = 600) -> str:
    """The last ``limit`` characters of a command's output, on one line each, for an error message."""
    text = output.decode("utf-8", errors="replace").strip()
    return text[-limit:] if text else "(no output)"


def _candidates() -> list[tuple[RuntimeKind, str]]:
    chosen = settings(only=(RUNTIME_ENV,)).container_runtime
    if chosen:
        kind = "docker" if os.path.basename(chosen).startswith("docker") else "podman"
        path = chosen if os.path.isabs(chosen) else shutil.which(chosen)
        if path is None or not os.access(path, os.X_OK):
            raise ContainerRuntimeUnavailable(f"{RUNTIME_ENV}={chosen}: no such program")
        return [(kind, path)]
    found = [(kind, shutil.which(kind)) for kind in ("podman", "docker")]
    return [(kind, path) for kind, path in found if path is not None]  # type: ignore[misc]


@functools.cache
def container_runtime() -> ContainerRuntime:
    """The runtime that runs task containers here (probed once per process), or :class:`ContainerRuntimeUnavailable`."""
    problems = []
    for kind, path in _candidates():
        runtime = ContainerRuntime(kind, path, _global_args(kind))
        try:
            proc = subprocess.run(
                runtime.argv(
                    "info", "--format", "{{.Host.OCIRuntime.Name}}" if kind == "podman" else "{{.ServerVersion}}"
                ),
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            problems.append(f"{kind} info did not answer within {PROBE_TIMEOUT_S:g}s")
            continue
        if proc.returncode == 0:
            return runtime
        problems.append(f"{kind}: {tail(proc.stderr, 200)}")
    found = "; ".join(problems) or "neither podman nor docker is installed"
    raise ContainerRuntimeUnavailable(f"no container runtime can run task containers ({found}): {INSTALL_HINT}")


def _global_args(kind: RuntimeKind) -> tuple[str, ...]:
    if kind == "podman" and shutil.which("runc"):
        return ("--runtime", "runc")
    return ()


def containers_available() -> bool:
    """Whether a container runtime runs task containers here (tasks with an image then run locally)."""
    try:
        container_runtime()
    except ContainerRuntimeUnavailable:
        return False
    return True
