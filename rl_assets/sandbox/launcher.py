"""The sandbox's outside: start the runner isolated, enforce the timeout.

Isolation, best the OS allows, probed once per process:
- as root: ``unshare --mount --net --pid`` (private mounts, no network, a
  fresh ``/proc`` that shows no process outside the sandbox, so no other
  process's environment), the fork an overlay mounted inside, and every
  other mount made read-only there;
- otherwise, where user namespaces are enabled: the same in a user namespace;
- otherwise: a plain subprocess, a plain-copy fork, and metadata that says so.

The runner gets ``PR_SET_PDEATHSIG`` and its own process group, so a timeout,
or the death of the step process, kills the whole sandbox: no orphans.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rl_assets.domain.agent import Rollout
from rl_assets.sandbox.protocol import EXIT_FAULT, RESULT_MARKER, SandboxFault, SandboxRequest

_PR_SET_PDEATHSIG = 1
_ISOLATIONS = (
    ("namespaces", ["unshare", "--mount", "--net", "--pid", "--mount-proc", "--fork", "--kill-child"]),
    (
        "user-namespaces",
        ["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--mount-proc", "--fork", "--kill-child"],
    ),
)


class SandboxTimeout(RuntimeError):
    """The rollout did not finish within its timeout and was killed."""


@dataclass(frozen=True)
class Isolation:
    name: str
    prefix: tuple[str, ...]
    overlay: bool
    """Whether an overlay can be mounted inside the sandbox (O(1) forks)."""

    @property
    def network_isolated(self) -> bool:
        return "--net" in self.prefix

    @property
    def confines_writes(self) -> bool:
        """Whether the runner gets its own mount and pid namespaces, where it can make mounts read-only."""
        return "--pid" in self.prefix and "--mount" in self.prefix


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgrp()


@functools.cache
def isolation() -> Isolation:
    """The strongest isolation this machine grants (probed with a real overlay mount)."""
    if shutil.which("unshare"):
        for name, prefix in _ISOLATIONS:
            with tempfile.TemporaryDirectory() as tmp:
                dirs = [Path(tmp, d) for d in ("lower", "upper", "work", "merged")]
                for d in dirs:
                    d.mkdir()
                opts = f"lowerdir={dirs[0]},upperdir={dirs[1]},workdir={dirs[2]}"
                probe = subprocess.run(
                    [*prefix, "mount", "-t", "overlay", "overlay", "-o", opts, str(dirs[3])],
                    capture_output=True,
                )
                if probe.returncode == 0:
                    return Isolation(name, tuple(prefix), overlay=True)
                plain = subprocess.run([*prefix, "true"], capture_output=True)
                if plain.returncode == 0:
                    return Isolation(name, tuple(prefix), overlay=False)
    return Isolation("none", (), overlay=False)


def sandbox_env() -> dict[str, str]:
    """The sandbox's whole environment: nothing of the parent's (no judge key, no database password)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in sys.path),
    }


def run_sandbox(request: SandboxRequest, timeout_s: float) -> Rollout:
    """Run one rollout attempt; raises SandboxFault, SandboxTimeout or RuntimeError."""
    cmd = [*isolation().prefix, sys.executable, "-m", "rl_assets.sandbox.runner"]
    request = request.model_copy(update={"confine_writes": isolation().confines_writes})
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=sandbox_env(),
        cwd=request.fork.merged if request.fork.kind == "copy" else "/",
        preexec_fn=_die_with_parent,
    )
    try:
        out, err = proc.communicate(request.model_dump_json(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise SandboxTimeout(f"rollout of {request.spec.trial_id} exceeded {timeout_s}s and was killed") from None
    return rollout_from_output(proc.returncode, out, err)


def rollout_from_output(exit_code: int | None, out: str, err: str) -> Rollout:
    """The runner's rollout from what it printed, wherever it ran (a local process or a pod)."""
    if exit_code == EXIT_FAULT:
        raise SandboxFault(err.strip())
    for line in out.splitlines():
        if line.startswith(RESULT_MARKER):
            return Rollout.model_validate_json(line[len(RESULT_MARKER) :])
    raise RuntimeError(f"sandbox exited {exit_code} without a rollout: {err.strip()[-2000:]}")
