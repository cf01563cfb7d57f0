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
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType

from rl_assets.sandbox import keeper, seccomp, task_keeper
from rl_assets.sandbox.bubblewrap import bubblewrap
from rl_assets.sandbox.launcher import DEFAULT_LIMITS, SANDBOX_UID, bwrap_argv, isolation, write_maps
from rl_assets.sandbox.limits import AttemptCgroup, Limits
from rl_assets.sandbox.protocol import CommandResult, ForkLayout
from rl_assets.sandbox.zygote import ForkedKeeper, Zygote

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


_OPEN_CALLS = {
    "x86_64": {2: (None, 0, 1), 85: (None, 0, None), 257: (0, 1, 2), 437: (0, 1, "how")},
    "aarch64": {56: (0, 1, 2), 437: (0, 1, "how")},
}
"""Per machine: the syscalls that open a path, as ``nr: (dirfd arg, path arg, flags arg)``; ``creat`` has no
flags argument (it opens ``O_WRONLY|O_CREAT|O_TRUNC``), ``openat2``'s flags are the first field of its ``how``."""
_AT_FDCWD = -100


class SandboxProcesses:
    """The processes of the command a :class:`TaskShell` is running, seen from the trusted side.

    A command is the keeper's child bubblewrap, whose child is the init (pid 1) of the command's pid
    namespace; the command itself is that namespace's pid 2. Everything is read through the command's
    own ``/proc`` (``/proc/<init>/root/proc``), which lists exactly its processes, by their pids in there.
    This side may read them all (as root, or as the owner of the namespaces' parent), even a process
    that made itself unreadable to its neighbours.
    """

    def __init__(self, keeper_pid: int) -> None:
        self.keeper_pid = keeper_pid
        self.proc: str | None = None
        self.since = _last_pid()
        """The last pid given out before the command: its processes' pids come after it."""
        self.calls = _OPEN_CALLS.get(os.uname().machine, {})

    def locate(self) -> bool:
        """Find the running command's namespace; False while it has not started (or has ended)."""
        if self.proc is not None:
            return True
        parents = _parents(self.since, _last_pid())
        outer = [pid for pid, parent in parents.items() if parent == self.keeper_pid]
        inits = [pid for pid, parent in parents.items() if parent in outer]
        for init in inits:
            proc = f"/proc/{init}/root/proc"
            with contextlib.suppress(OSError, IndexError):
                # the command's own /proc (not this side's, before bubblewrap has pivoted): its pid 1 is the init
                same = _started(f"{proc}/1/stat") == _started(f"/proc/{init}/stat")
                if same and os.path.exists(f"{proc}/2"):
                    self.proc = proc
                    return True
        return False

    def pids(self) -> list[int]:
        """The command's processes (by their pids in its namespace), its init left out."""
        try:
            return sorted(int(name) for name in os.listdir(self.proc) if name.isdigit() and name != "1")
        except OSError:
            return []

    def tasks(self) -> list[tuple[int, int]]:
        """``(pid, tid)`` of every thread of the command's processes."""
        found = []
        for pid in self.pids():
            with contextlib.suppress(OSError):
                found += [(pid, int(tid)) for tid in os.listdir(f"{self.proc}/{pid}/task") if tid.isdigit()]
        return found

    def _read(self, pid: int, what: str, size: int = 4096, tid: int | None = None) -> bytes:
        path = f"{self.proc}/{pid}/{what}" if tid is None else f"{self.proc}/{pid}/task/{tid}/{what}"
        try:
            with open(path, "rb", buffering=0) as f:
                return f.read(size)
        except OSError:
            return b""

    def parent(self, pid: int) -> int | None:
        """The process's parent, by its pid in the command's namespace."""
        with contextlib.suppress(IndexError, ValueError):
            return int(self._read(pid, "stat", 1024).rsplit(b")", 1)[1].split()[1])
        return None

    def exe(self, pid: int) -> str:
        """The program the process runs (its path in the sandbox), or ``""``."""
        try:
            return os.readlink(f"{self.proc}/{pid}/exe")
        except OSError:
            return ""

    def environ(self, pid: int) -> dict[bytes, bytes]:
        """The environment the process started its program with."""
        pairs = (item.split(b"=", 1) for item in self._read(pid, "environ", 1 << 16).split(b"\0") if b"=" in item)
        return dict(pairs)

    def undumpable(self, pid: int) -> bool:
        """Whether the process is not dumpable: its ``/proc`` files are then root's, not its own uid's."""
        try:
            return os.stat(f"{self.proc}/{pid}/environ").st_uid == 0  # (the directory is always the process's)
        except OSError:
            return False

    def cmdline(self, pid: int) -> list[bytes]:
        return self._read(pid, "cmdline", 1 << 16).split(b"\0")[:-1]

    def describe(self, pid: int) -> str:
        """``pid 7 (python3 /tests/test_stats.py)``: a process as a person reads it."""
        cmdline = self._read(pid, "cmdline", 300).replace(b"\0", b" ").strip()
        return f"pid {pid} ({cmdline.decode(errors='replace')[:200] or '?'})"

    def memory(self, pid: int, address: int, size: int) -> bytes:
        """Up to ``size`` bytes of the process's memory at ``address`` (fewer where a mapping ends)."""
        try:
            fd = os.open(f"{self.proc}/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return b""
        try:
            out = b""
            while len(out) < size:
                page_left = 4096 - (address + len(out)) % 4096
                try:
                    chunk = os.pread(fd, min(page_left, size - len(out)), address + len(out))
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            return out
        finally:
            os.close(fd)

    def waiting_open(self, pid: int, tid: int) -> WaitingOpen | None:
        """What the thread waits to open, if it sleeps inside an open call (a FIFO waiting for its other end).

        The call and its register arguments are the kernel's (the flags of ``open``, ``openat`` and ``creat``
        are exact); the path and ``openat2``'s flags are read from the process's memory, which its other
        threads may have changed since: ``file`` is what the path names now, as the thread would resolve it.
        """
        line = self._read(pid, "syscall", 512, tid)
        fields = line.split()
        try:
            nr, args = int(fields[0]), [int(v, 16) for v in fields[1:7]]
        except (ValueError, IndexError):
            return None  # "running", or not in a call
        if nr not in self.calls or self._read(pid, "stat", 1024, tid).rsplit(b")", 1)[-1].split()[:1] != [b"S"]:
            return None
        dirfd_arg, path_arg, flags_arg = self.calls[nr]
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC if flags_arg is None else None
        if isinstance(flags_arg, int):
            flags = args[flags_arg]
        path = self.memory(pid, args[path_arg], 4096).split(b"\0", 1)[0]
        task = f"{self.proc}/{pid}/task/{tid}"
        if path.startswith(b"/"):
            base = f"{task}/root"
        else:
            dirfd = args[dirfd_arg] if dirfd_arg is not None else _AT_FDCWD
            dirfd = dirfd - (1 << 64) if dirfd >= 1 << 63 else dirfd
            dirfd = dirfd - (1 << 32) if dirfd >= 1 << 31 else dirfd
            base = f"{task}/cwd" if dirfd == _AT_FDCWD else f"{self.proc}/{pid}/fd/{dirfd}"
        file = None
        with contextlib.suppress(OSError, ValueError):
            if path:
                st = os.stat(os.fsencode(base) + b"/" + path)
                file = (st.st_dev, st.st_ino)
        return WaitingOpen(line, flags, file)

    def holds(self, pid: int, inode: tuple[int, int]) -> bool:
        """Whether the process has the file ``(st_dev, st_ino)`` open."""
        fds = f"{self.proc}/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            return False
        for name in names:
            with contextlib.suppress(OSError):
                st = os.stat(f"{fds}/{name}")
                if (st.st_dev, st.st_ino) == inode:
                    return True
        return False


@dataclass(frozen=True)
class WaitingOpen:
    """A thread asleep in an open call: the call as ``/proc`` shows it, its flags, the file its path names now."""

    call: bytes
    flags: int | None
    """None where they are not known for sure (``openat2``'s, in the caller's memory): take it for a writer."""
    file: tuple[int, int] | None
    """``(st_dev, st_ino)`` of what the path resolves to now; None if nothing."""

    @property
    def writes(self) -> bool:
        return self.flags is None or self.flags & os.O_ACCMODE != os.O_RDONLY


def _started(stat_path: str) -> bytes:
    """A process's start time (``/proc/<pid>/stat``'s 22nd field): with its pid, who it is."""
    with open(stat_path, "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[19]


def _last_pid() -> int:
    """The pid last given out on this machine (``/proc/loadavg``'s last field)."""
    with open("/proc/loadavg", "rb") as f:
        return int(f.read().split()[-1])


def _parents(since: int, last: int) -> dict[int, int]:
    """pid -> parent pid of the processes of this machine started since pid ``since`` was given out, up to ``last``.

    Pids are given out in order, wrapping around (no ``/proc/<pid>/task/*/children`` on every kernel).
    """
    found = {}
    for pid in (int(name) for name in os.listdir("/proc") if name.isdigit()):
        if since < pid <= last or (last < since and (pid > since or pid <= last)):
            with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/stat", "rb") as f:
                found[pid] = int(f.read().rsplit(b")", 1)[1].split()[1])
    return found


def write_in_child(script: str, *args: object, data: bytes = b"") -> None:
    """Run ``sh -c script`` on ``args`` (``$1``...), ``data`` on its stdin, to write files of a sandbox's phase.

    Files that a guard will watch are written by a child process, never through a descriptor of this one. A
    rollout run's worker spawns processes from many threads at once; each child holds a copy of every
    descriptor open at its fork until its exec, and closing a copy of a write descriptor there is an
    ``IN_CLOSE_WRITE`` on the file, which can come after the guard started watching: a change it must flag.
    """
    subprocess.run(["sh", "-c", script, "sh", *map(str, args)], input=data, capture_output=True, check=True)


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
        self.proc: ForkedKeeper | None = None
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
            "seccomp_fd": task_keeper.SECCOMP_RECEIVED,
            "workdir": self.workdir,
            "bwrap": bwrap_argv("task", seccomp_fd=task_keeper.SECCOMP_FD),
            "tool": [list(t) for t in bubblewrap().staged],
        }
        self.cgroup = AttemptCgroup(self.limits) if self.host_uid is not None else None
        self.proc = Zygote.of(sys.executable).start_keeper([sec], kind=b"task")
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
        # poll, not select: a rollout run drives hundreds of keepers from one process, past select's 1024 fds
        ready = select.poll()
        ready.register(self.proc.stdout, select.POLLIN)
        if not ready.poll(wait_s * 1000):
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

    def new_dir(self, copy_of: Path | None = None, *, protected: bool = False) -> Path:
        """A fresh directory of the attempt (a copy of ``copy_of``) that only a later :meth:`run_phase` sees.

        ``protected``: its commands may add entries (its directories are sticky and writable by all) but,
        launched as root, neither change nor remove what is there (it stays the launcher's, writable by no
        one else). Launched unprivileged the sandbox's uid is the owner, who may undo modes, so a caller
        that needs the contents intact also watches them (see :mod:`rl_assets.sandbox.task_trial`).
        """
        self._dirs += 1
        path = self.base / f"phase-{self._dirs}-{secrets.token_hex(4)}"
        path.mkdir()
        if copy_of is not None:  # by a child process: see write_in_child
            write_in_child('cp -R -P --preserve=mode,timestamps -- "$1/." "$2"', copy_of, path)
        for entry in [path, *path.rglob("*")]:
            mode = entry.lstat().st_mode
            if protected and stat.S_ISDIR(mode):
                entry.chmod(0o1777)
            elif protected and stat.S_ISREG(mode):
                entry.chmod(stat.S_IMODE(mode) & ~0o7022)
            elif self.host_uid is not None:  # the sandbox's host uid owns it, so its commands may write there
                os.lchown(entry, self.host_uid, self.host_uid)
        return path

    @property
    def privileged(self) -> bool:
        """Launched as root: the sandbox runs as a uid of its own, and this side may read any of its processes."""
        return self.host_uid is not None

    def fork_view(self) -> Path:
        """The fork as the sandbox's commands see it at the working directory, reached from this side.

        Through the keeper's mount namespace (``/proc/<keeper>/root``), where the fork is mounted on the
        stage; for the trusted side to inspect (and tidy) between commands, when none is running.
        """
        if self.proc is None or self.proc.poll() is not None:
            raise TaskSandboxError("the task sandbox is closed")
        return Path(f"/proc/{self.proc.pid}/root{keeper.STAGE_POINT}/fork")

    def processes(self) -> SandboxProcesses:
        """The processes of the command that is running (or about to run), seen from this side."""
        if self.proc is None:
            raise TaskSandboxError("the task sandbox is closed")
        return SandboxProcesses(self.proc.pid)

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
            if self.proc.poll() is None:  # its group, while it lives: the zygote reaps it, its pid is not held
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            with contextlib.suppress(OSError):
                self.proc.stdout.close()
            self.proc.close()
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
