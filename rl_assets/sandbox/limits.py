"""Per-attempt resource limits: cgroups where this process may create them, and rlimits always.

A cgroup per attempt (v2 where a writable unified hierarchy has the controllers, else v1's ``pids``,
``memory`` and ``cpu``) bounds the rollout's processes, memory and CPU, and is also the attempt's handle:
every process of the attempt is in it, however it renamed or re-parented itself, so the launcher kills
and checks by it. Where no cgroup is writable (an unprivileged caller), the rlimits remain: per-uid
``RLIMIT_NPROC`` (counted in the sandbox's own user namespace), ``RLIMIT_AS`` and ``RLIMIT_CPU``.

Memory held in a tmpfs counts against no rlimit, and against no cgroup for an unprivileged caller, so every
tmpfs a sandbox can write is sized, whoever launched it: the attempt's quota (:attr:`Limits.fork_bytes`)
holds the fork's writes and ``/dev/shm``; bubblewrap's own ``/dev`` (half the host's memory) is read-only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from rl_assets.domain.waiting import Waiting

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "rl-assets-"
SWEEP_EVERY_S = 60.0
"""How often a process looks for dead launchers' attempt cgroups, per hierarchy."""
_last_sweep: dict[Path, float] = {}
"""Attempt cgroups are ``rl-assets-<launcher pid>-<random>``: one whose launcher is dead was left by a SIGKILL."""


@dataclass(frozen=True)
class Limits:
    """What one rollout attempt may use."""

    pids: int = 64
    memory_bytes: int = 512 << 20
    cpu_cores: float = 1.0
    fork_bytes: int = 64 << 20
    """The attempt's quota: a tmpfs of this size holds the overlay's upper dir (the fork's writes) and the sandbox's
    ``/dev/shm``. A task attempt's ``/tmp`` is a second tmpfs of this size, and a trusted phase of a task (the
    verifier) gets a fresh ``/tmp`` and ``/dev/shm`` of this size each."""
    file_bytes: int = 64 << 20
    open_files: int = 256
    address_space_bytes: int = 4 << 30
    output_bytes: int = 256 << 10
    """stdout and stderr together; more kills the attempt."""
    answer_chars: int = 1024
    files_written: int = 64
    path_chars: int = 255
    tool_request_bytes: int = 4096

    def rlimits(self, timeout_s: float) -> dict[str, int]:
        """``resource`` names and values, set in the sandbox before exec (no core dumps at all)."""
        return {
            "RLIMIT_NPROC": self.pids,
            "RLIMIT_FSIZE": self.file_bytes,
            "RLIMIT_NOFILE": self.open_files,
            "RLIMIT_CORE": 0,
            "RLIMIT_AS": self.address_space_bytes,
            "RLIMIT_CPU": int(timeout_s) + 5,
        }


class AttemptCgroup:
    """The attempt's cgroups (one per available controller), created before its keeper starts."""

    def __init__(self, limits: Limits) -> None:
        self.dirs: list[Path] = []
        name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        for controller, files in _controllers(limits).items():
            parent = CGROUP_ROOT / controller if controller else _unified()
            _remove_orphans(parent)
            path = parent / name
            try:
                path.mkdir()
            except OSError:
                continue
            self.dirs.append(path)
            for file, value in files.items():
                (path / file).write_text(value)

    def add(self, pid: int) -> None:
        for path in self.dirs:
            (path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.dirs:
            try:
                found |= {int(p) for p in (path / "cgroup.procs").read_text().split()}
            except FileNotFoundError:
                pass
        return found

    def kill_and_remove(self) -> None:
        """SIGKILL whatever is left in the attempt's cgroups, then remove them (they must be empty to go)."""
        deadline = Waiting(timeout_s=10, interval_s=0.01).deadline()  # a killed process takes a moment to leave
        for path in self.dirs:
            while True:
                for pid in self.pids():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if deadline.expired():
                        raise RuntimeError(f"processes of a sandbox attempt outlived SIGKILL in {path}") from None
                    deadline.sleep()


def _remove_orphans(parent: Path) -> None:
    """Remove the empty attempt cgroups of launchers that died (SIGKILLed mid-attempt, they could not).

    At most once every ``SWEEP_EVERY_S`` per hierarchy and process: a sweep lists every attempt's cgroup,
    so sweeping before each attempt was quadratic in the attempts in flight (with 256 starting at once,
    an eighth of the rollout worker's CPU).
    """
    now = time.monotonic()
    if parent in _last_sweep and now - _last_sweep[parent] < SWEEP_EVERY_S:
        return
    _last_sweep[parent] = now
    for path in parent.glob(f"{PREFIX}*"):
        pid = path.name[len(PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):  # not empty yet, or another launcher removed it first
                path.rmdir()


def _unified() -> Path:
    return CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").exists() else CGROUP_ROOT / "unified"


def _controllers(limits: Limits) -> dict[str, dict[str, str]]:
    """v2 if the unified hierarchy offers pids, memory and cpu; else v1's three hierarchies."""
    unified = _unified()
    try:
        offered = set((unified / "cgroup.subtree_control").read_text().split())
    except OSError:
        offered = set()
    period = 100_000
    quota = int(limits.cpu_cores * period)
    if {"pids", "memory", "cpu"} <= offered:
        return {
            "": {"pids.max": str(limits.pids), "memory.max": str(limits.memory_bytes), "cpu.max": f"{quota} {period}"}
        }
    return {
        "pids": {"pids.max": str(limits.pids)},
        "memory": {"memory.limit_in_bytes": str(limits.memory_bytes)},
        "cpu": {"cpu.cfs_period_us": str(period), "cpu.cfs_quota_us": str(quota)},
    }
