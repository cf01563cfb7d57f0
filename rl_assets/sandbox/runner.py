"""The sandbox's inside: mount the fork, run the agent, print the rollout.

Run as ``python -m rl_assets.sandbox.runner`` with a :class:`SandboxRequest`
on stdin. It imports only the domain, so it starts in a fraction of a second.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

from rl_assets.domain.agent import run_agent
from rl_assets.sandbox.protocol import EXIT_FAULT, RESULT_MARKER, SandboxFault, SandboxRequest


class ForkTools:
    """File tools confined to the fork: a path that escapes it is refused."""

    def __init__(self, root: Path, latency_s: float) -> None:
        self.root = root.resolve()
        self.latency_s = latency_s

    def _inside(self, rel: str) -> Path:
        path = (self.root / rel).resolve()
        if path != self.root and self.root not in path.parents:
            raise PermissionError(f"{rel!r} is outside the sandbox's fork")
        return path

    def read(self, path: str) -> str:
        if self.latency_s:
            time.sleep(self.latency_s)
        return self._inside(path).read_text(encoding="utf-8")

    def write(self, path: str, text: str) -> None:
        self._inside(path).write_text(text, encoding="utf-8")


def _mount_overlay(request: SandboxRequest) -> None:
    fork = request.fork
    options = f"lowerdir={fork.lower},upperdir={fork.upper},workdir={fork.work}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, fork.merged], check=True)


_SYS_MOUNT_SETATTR = 442  # the same number on every architecture (the generic syscall table)
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def _set_read_only(path: str, read_only: bool, recursive: bool) -> None:
    attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0) if read_only else _MountAttr(0, _MOUNT_ATTR_RDONLY, 0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    flags = _AT_RECURSIVE if recursive else 0
    if libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr)):
        raise OSError(ctypes.get_errno(), f"mount_setattr({path!r}) failed")


def _confine_writes(request: SandboxRequest) -> None:
    """Make every mount read-only except the fork: the agent can write nowhere else, whatever it runs.

    Only inside the sandbox's own namespaces (it is their pid 1): in the host's, this would make the host's
    filesystems read-only. The overlay was mounted first, so its upper directory stays writable to it.
    """
    if os.getpid() != 1:
        raise RuntimeError("refusing to confine writes outside the sandbox's own namespaces")
    merged = request.fork.merged
    if request.fork.kind == "copy":
        subprocess.run(["mount", "--bind", merged, merged], check=True)  # the fork becomes its own mount
    _set_read_only("/", read_only=True, recursive=True)
    _set_read_only(merged, read_only=False, recursive=False)


def main() -> int:
    request = SandboxRequest.model_validate_json(sys.stdin.read())
    if request.fork.kind == "overlay":
        _mount_overlay(request)
    if request.confine_writes:
        _confine_writes(request)
    if request.hang:
        while True:  # an injected hung sandbox: only the launcher's timeout ends it
            time.sleep(3600)

    def on_fault_draw(draw: float) -> None:
        if draw < request.fail_below:
            raise SandboxFault(f"injected sandbox fault (fault draw {draw:.3f} < {request.fail_below})")

    try:
        rollout = run_agent(
            request.spec,
            request.prior,
            ForkTools(Path(request.fork.merged), request.tool_latency_s),
            on_fault_draw=on_fault_draw,
        )
    except SandboxFault as fault:
        print(str(fault), file=sys.stderr)
        return EXIT_FAULT
    print(RESULT_MARKER + rollout.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
