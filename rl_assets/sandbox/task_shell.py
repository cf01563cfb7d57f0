"""A Harbor task's sandbox: the :class:`~rl_assets.sandbox.protocol.Shell` one trial attempt's commands run in.

The world (the attempt's fork, overlay or copy) is the writable working directory (``/app``, or the
task's ``[environment] workdir``); around it, what a base image has: the machine's ``/usr``, ``/bin``
and ``/lib*`` read-only, a minimal ``/etc``, a private ``/tmp``. Nothing of the home, ``/root``,
``/work``, our virtualenv, another fork or a Postgres socket exists in there, and there is no network:
sharing the host's network namespace would hand untrusted commands the loopback services (Postgres,
Ray, Dagster), so a task's ``network_mode`` is not honoured locally (see :mod:`rl_assets.tasks.locality`).

One keeper (:mod:`.task_keeper`) per attempt holds the fork's mounts in its own namespaces for the
whole session, so what a command writes stays for the next; each command is a fresh bubblewrap in it,
and nothing a command starts outlives it. The trusted phases (the oracle's ``solve.sh``, the verifier)
run through :meth:`TaskShell.run_phase` with directories bound for that one command only. Where user
namespaces are unavailable this refuses to start (:class:`TaskSandboxUnavailable`): unlike the
reference rollout, a task runs untrusted commands, which never run unsandboxed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from types import TracebackType

from rl_assets.sandbox import keeper, seccomp, task_keeper
from rl_assets.sandbox.bubblewrap import bubblewrap
from rl_assets.sandbox.launcher import DEFAULT_LIMITS, SANDBOX_UID, bwrap_argv, die_with_parent, isolation, write_maps
from rl_assets.sandbox.limits import AttemptCgroup, Limits
from rl_assets.sandbox.protocol import CommandResult, ForkLayout

DEFAULT_WORKDIR = "/app"
"""Harbor's usual ``WORKDIR``."""
OUTPUT_BYTES = 32 << 10
"""A command's output kept (its first and last half): what an agent can read back, whatever it printed."""
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_ETC = (
    "alternatives", "bash.bashrc", "debian_version", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "localtime", "magic", "mime.types", "nsswitch.conf", "os-release", "profile", "protocols", "python3",
    "services", "ssl", "terminfo", "timezone",
)  # fmt: skip
"""What of ``/etc`` a command sees: the files tools read, none of the host's service configs or credentials."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_RESERVED = ("/", *SYSTEM_DIRS, "/etc", "/proc", "/dev", "/tmp", "/tests", "/logs", "/solution")
REPLY_GRACE_S = 30.0
"""How long past a command's timeout its keeper may take to answer (the kill, the reaping) before the attempt fails."""


class TaskSandboxUnavailable(RuntimeError):
    """This machine cannot sandbox a task's commands (no user namespaces), so they are not run at all."""


class TaskSandboxError(RuntimeError):
    """The attempt's keeper failed or stopped answering: the attempt is over."""


def _system_files() -> tuple[list[list[str]], list[list[str]]]:
    """(read-only binds, symlinks) for the system directories that exist here; a merged ``/usr``'s links stay links."""
    binds, links = [], []
    for path in (*SYSTEM_DIRS, *(f"/etc/{name}" for name in SYSTEM_ETC)):
        if os.path.islink(path) and path in SYSTEM_DIRS:
            links.append([os.readlink(path), path])
        elif os.path.exists(path):
            binds.append([path, path])
    return binds, links


def _checked_workdir(workdir: str) -> str:
    """The working directory as an absolute path that no system mount, ``/tmp`` or a phase's directory covers."""
    path = PurePosixPath(workdir)
    covered = any(path.is_relative_to(reserved) for reserved in _RESERVED if reserved != "/")
    if not path.is_absolute() or ".." in path.parts or path == PurePosixPath("/") or covered:
        raise ValueError(f"workdir {workdir!r}: must be an absolute path outside the system directories")
    return str(path)


class TaskShell:
    """One attempt's sandbox on its fork: a context manager; :meth:`close` leaves no process and no mount."""

    def __init__(
        self,
        fork: ForkLayout,
        *,
        workdir: str = DEFAULT_WORKDIR,
        env: Mapping[str, str] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        output_bytes: int = OUTPUT_BYTES,
    ) -> None:
        if isolation().name != "bwrap":
            raise TaskSandboxUnavailable(
                "no user namespaces here: a task's commands run only in the bubblewrap sandbox, never unsandboxed"
            )
        self.workdir = _checked_workdir(workdir)
        self.env = {"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **(env or {})}
        self.limits, self.output_bytes = limits, output_bytes
        self.base = Path(fork.upper).parent / "task-sandbox"
        self.host_uid = (1 << 20) + secrets.randbelow(1 << 29) if os.geteuid() == 0 else None
        self.cgroup: AttemptCgroup | None = None
        self.proc: subprocess.Popen | None = None
        self._dirs = 0
        self.base.mkdir(parents=True)  # before anything that close() undoes: a second shell on a fork stops here
        try:
            self._start(fork)
        except BaseException:
            self.close()
            raise

    # -- the session -------------------------------------------------------------------------------

    def _start(self, fork: ForkLayout) -> None:
        for d in keeper.SANDBOX_DIRS:
            (self.base / d).mkdir()
        binds, symlinks = _system_files()
        uid = SANDBOX_UID if self.host_uid is not None else 0
        sec = seccomp.filter_fd()
        config = {
            "base": str(self.base),
            "overlay": fork.kind == "overlay",
            "lower": fork.lower,
            "merged": fork.merged,
            "quota_bytes": self.limits.fork_bytes,
            "tmp_bytes": self.limits.fork_bytes,
            "sandbox_uid": uid,
            "bwrap_uid": uid,
            "command_uid": SANDBOX_UID,
            "binds": binds,
            "symlinks": symlinks,
            "seccomp_fd": sec,
            "workdir": self.workdir,
            "bwrap": bwrap_argv("task", seccomp_fd=task_keeper.SECCOMP_FD),
            "tool": [list(t) for t in bubblewrap().staged],
        }
        self.cgroup = AttemptCgroup(self.limits) if self.host_uid is not None else None
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", task_keeper.__file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={},
                cwd="/",
                pass_fds=(sec,),
                preexec_fn=die_with_parent,
            )
        finally:
            os.close(sec)
        if self.cgroup is not None:
            self.cgroup.add(self.proc.pid)
        first = self.proc.stdout.readline()
        if first.strip() != b"unshared":
            raise TaskSandboxError(f"task sandbox keeper failed to start: {first[:500].decode(errors='replace')}")
        write_maps(self.proc.pid, self.host_uid)
        self._send(config)
        reply = self._receive(30.0)
        if not reply.get("ready"):
            raise TaskSandboxError(f"task sandbox set-up failed: {reply.get('error', reply)}")

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise TaskSandboxError("the task sandbox's keeper is gone") from None

    def _receive(self, wait_s: float) -> dict:
        if not select.select([self.proc.stdout], [], [], wait_s)[0]:
            raise TaskSandboxError(f"the task sandbox's keeper did not answer within {wait_s:g}s")
        line = self.proc.stdout.readline(8 * self.output_bytes + 4096)
        try:
            return json.loads(line)
        except ValueError:
            raise TaskSandboxError("the task sandbox's keeper died mid-attempt") from None

    # -- commands ----------------------------------------------------------------------------------

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """An agent's command (the :class:`~rl_assets.sandbox.protocol.Shell` seam): nothing but ``/tmp`` bound."""
        return self._command(command, timeout_s, {}, self.env, fresh_tmp=False)

    def run_phase(
        self, command: str, timeout_s: float, mounts: Mapping[str, Path], env: Mapping[str, str]
    ) -> CommandResult:
        """A trusted phase's command (the oracle, the verifier): ``mounts`` (made by :meth:`new_dir`) bound for it only.

        It gets a fresh empty ``/tmp`` and ``HOME``: nothing an agent's command left there (a ``.local``
        site-packages, a ``sitecustomize``) runs in the verifier.
        """
        return self._command(command, timeout_s, mounts, {**self.env, **env}, fresh_tmp=True)

    def new_dir(self, copy_of: Path | None = None) -> Path:
        """A fresh directory of the attempt (a copy of ``copy_of``) that only a later :meth:`run_phase` sees."""
        self._dirs += 1
        path = self.base / f"phase-{self._dirs}-{secrets.token_hex(4)}"
        if copy_of is None:
            path.mkdir()
        else:
            shutil.copytree(copy_of, path, symlinks=True)
        if self.host_uid is not None:  # the sandbox's host uid owns it, so its commands may write there
            for entry in [path, *path.rglob("*")]:
                os.lchown(entry, self.host_uid, self.host_uid)
        return path

    def _command(
        self, command: str, timeout_s: float, mounts: Mapping[str, Path], env: Mapping[str, str], fresh_tmp: bool
    ) -> CommandResult:
        if self.proc is None or self.proc.poll() is not None:
            raise TaskSandboxError("the task sandbox is closed")
        for host in mounts.values():
            if host.parent != self.base:
                raise ValueError(f"{host}: a phase's mount must be a directory made by new_dir()")
        start = time.monotonic()
        self._send(
            {
                "argv": ["/bin/bash", "-c", command],
                "timeout_s": timeout_s,
                "env": dict(env),
                "mounts": [[host.name, dest] for dest, host in mounts.items()],
                "fresh_tmp": fresh_tmp,
                "rlimits": self.limits.rlimits(timeout_s),
                "output_bytes": self.output_bytes,
            }
        )
        reply = self._receive(timeout_s + task_keeper.DRAIN_S + REPLY_GRACE_S)
        if "error" in reply:
            raise TaskSandboxError(f"task sandbox command failed: {reply['error']}")
        cut = reply["cut"]
        output = reply["head"] + (f"\n[... {cut} bytes of output cut ...]\n" if cut else "") + reply["tail"]
        return CommandResult(
            exit_code=reply["exit"],
            output=output,
            truncated=cut > 0,
            timed_out=reply["timed_out"],
            seconds=time.monotonic() - start,
        )

    # -- the end -----------------------------------------------------------------------------------

    @property
    def keeper_pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def close(self) -> None:
        """End the session: the keeper exits (its mounts vanish with its namespace); whatever is left is killed."""
        if self.proc is not None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.close()  # the keeper's "no more commands"
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            with contextlib.suppress(OSError):
                self.proc.stdout.close()
        if self.cgroup is not None:
            self.cgroup.kill_and_remove()
            self.cgroup = None
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> TaskShell:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
