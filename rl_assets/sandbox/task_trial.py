"""The trusted phases of a Harbor task's trial, through the task sandbox: the verifier, and the oracle agent.

The verifier runs ``tests/test.sh`` on the fork as the agent left it. Its ``/tests`` (a copy of the
task's ``tests/``), ``/logs/verifier`` and ``/logs/agent`` are directories of the attempt made only now
and bound for that one command, so no command of the agent ever saw the tests or could write the
reward: its commands' processes are all dead (each command's pid namespace died with it) and neither
path existed in their sandboxes.

But the verifier often runs code the agent wrote (it imports the agent's module, runs its script), in
the same sandbox, as the same uid, as ``test.sh`` itself. So before and around ``test.sh``:

- **the agent's final filesystem is tidied**: symbolic links whose target leaves the fork (into
  ``/tests``, ``/logs``, ``/tmp``, ``/proc``, ``/dev``..., anywhere but the read-only system directories)
  and FIFOs, sockets and device nodes are removed first, and named in :attr:`VerifierResult.neutralised`
  (``ln -s /tests/expected.txt result.txt`` no longer hands the verifier its own answer);
- **Python does not import from the working directory first**: ``PYTHONSAFEPATH=1`` (a task may unset it
  in ``[verifier] env``), so an agent's ``json.py`` does not shadow the standard library of test.sh's
  ``python3 -c``; a test that imports the agent's module says so (``sys.path.insert(0, ".")``);
- **the tests and the answer cannot be changed**: launched as root they stay the launcher's, read-only to
  the sandbox (which may still add files, e.g. ``__pycache__``); any change to one is also seen (inotify)
  and flags the reward, which covers an unprivileged launcher too;
- **the reward's bytes come from test.sh's own shell, or from a Python it started that ran none of the
  agent's code**. ``/logs/verifier/reward.json`` and ``reward.txt`` are links to FIFOs of the harness's in
  ``/run/rl-assets/reward``, nobody reading them: whoever opens one to write waits inside ``open``, where
  this side sees it (through the command's ``/proc``: who, which file, with which flags). A write is let
  through by giving those waiting alone a fresh FIFO's other end (the name gets a new FIFO first, so no one
  else can join); its bytes make the reward, with a regular file's semantics (``>`` truncates, ``>>``
  appends), only if the one writer was trusted: test.sh's shell, which runs from a copy of bash that the
  sandbox can execute but not read (launched as root), so no other process in there can reach its memory
  or descriptors; or a Python the shell itself started that loads the harness's import guard
  (:data:`IMPORT_GUARD`, first on ``PYTHONPATH``), which the moment it is about to run code of the agent's
  (a module, bytecode, a native library, a script from the working directory) loses for good the right to
  write the reward (Landlock, inherited by whatever it starts): such a Python waits on a FIFO only if it
  has run test.sh's code alone. Any other writer (a program of the agent's, ``tee``, a subshell, a Python
  started with ``-I`` or by another program) is let through too, so nothing hangs, but its bytes are
  discarded and the result flagged; so is an open of a FIFO while the guard held none of its ends (seen
  with inotify), anyone else waiting to open a file for writing as a window opens, a replaced link or
  FIFO, and a changed test.

The result's :attr:`~rl_assets.tasks.verifier.VerifierResult.provenance` is ``"verifier"``, or
``"flagged: <why>"``: the reward is still only what trusted writers wrote, but the platform cannot vouch
for it and the blocking asset check refuses to train on it. What this cannot see: the verifier's decisions
themselves, where they rest on what the agent's code did (its exit status, its output, the files it
writes, anything it does inside the process that runs it); see docs/security.md.

The verifier's time counts against the trial's ``deadline`` when one is given. The oracle is Harbor's:
``solution/solve.sh`` (copied to ``/solution``) as the agent, one command, then the verifier (what
``solve.sh`` printed is the agent's final message), on a fresh fork of the task's ``environment/`` files;
``rl-assets tasks check`` runs it to prove each task solvable. The world is a temporary copy, removed
afterwards; the fork an overlay on it.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import re
import select
import shutil
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType

from rl_assets.sandbox.protocol import ForkLayout
from rl_assets.sandbox.task_shell import (
    DEFAULT_WORKDIR,
    SYSTEM_DIRS,
    SandboxProcesses,
    TaskSandboxError,
    TaskSandboxUnavailable,
    TaskShell,
    WaitingOpen,
    write_in_child,
)
from rl_assets.tasks.check import OracleRun
from rl_assets.tasks.task import Task
from rl_assets.tasks.verifier import (
    FLAGGED,
    PROVENANCE_VERIFIER,
    REWARD_FILE_BYTES,
    REWARD_JSON,
    REWARD_TXT,
    VerifierError,
    VerifierResult,
    VerifierTimeout,
    reward_range,
    rewards_from,
    verifier_time,
)

ANSWER_FILE = "answer.txt"
"""The agent's final message, in ``/logs/agent`` for the verifier."""
ORACLE_TIMEOUT_S = 600.0
"""``solve.sh``'s timeout when the task's ``[agent] timeout_sec`` is unset (Harbor's: none at all)."""
SHELL_DIR = "/run/rl-assets"
"""The guard's directory in the verifier's sandbox: the import guard, the shell, and ``reward/``, the FIFOs."""
VERIFIER_SHELL = f"{SHELL_DIR}/bash"
"""The verifier's shell launched as root: a copy of the machine's bash, executable but not readable in the sandbox."""
SHELL_PID = 2
"""test.sh's shell in the verifier's pid namespace (bubblewrap's init is 1; the command, exec'ing the shell, 2)."""
VERIFIER_ENV = {"PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1"}
"""Under the task's ``[verifier] env``, which may override it (``PYTHONPATH`` gets the import guard first)."""
_PYTHON = re.compile(rb"python3(\.\d+)?")
NOT_DUMPABLE = "RL_ASSETS_NOT_DUMPABLE"
"""Set (launched as root): the import guard makes each Python undumpable as it starts, as the shell is."""
POLL_S = 0.01
"""How often the guard looks for a process waiting to open a reward file: the most a reward write waits."""
KEPT_LINKS = (*SYSTEM_DIRS, "/etc")
"""Where a link of the agent's may still point: the read-only system files, which the verifier reads anyway."""
NEUTRALISED_SHOWN = 50
FLAGS_SHOWN = 8

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE, _IN_OPEN = 0x2, 0x4, 0x8, 0x20
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE, _IN_Q_OVERFLOW = 0x40, 0x80, 0x100, 0x200, 0x4000
_CHANGED = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO
_EVENT = struct.Struct("iIII")
_LIBC = ctypes.CDLL(None, use_errno=True)


IMPORT_GUARD = r'''"""rl-assets' import guard for the verifier's Python (put first on its path as PYTHONPATH).

The moment this process is about to run code from outside the machine's and the task's own files (a module
of the agent's, its bytecode, a native library, a script), it loses for good (Landlock, inherited by every
process it starts) the right to write anything under /run/rl-assets, where the reward files are, or under
/proc (another process's memory), and any reward file it already has open is pointed at /dev/null. If that
cannot be done, the process stops. Asked to (RL_ASSETS_NOT_DUMPABLE), it first makes itself undumpable.
"""

import os
import sys

_GUARDED = "/run/rl-assets"
_TRUSTED = ("/usr/", "/lib/", "/lib32/", "/lib64/", "/libx32/", "/bin/", "/sbin/", "/etc/", "/tests/", _GUARDED + "/")
_EVENTS = frozenset({"exec", "cpython.run_file", "ctypes.dlopen"})
_fenced = False


def _untrusted(path):
    try:
        path = os.fsdecode(path)
        if not path or path.startswith("<"):
            return False  # "<string>", "<frozen ...>": no file
        return not os.path.realpath(path).startswith(_TRUSTED)
    except Exception:
        return True


def _library(name):
    """ctypes.CDLL(name): a bare name is the loader's to find, in the system's directories (or LD_LIBRARY_PATH's)."""
    if isinstance(name, (str, bytes)) and "/" not in os.fsdecode(name) and not os.environ.get("LD_LIBRARY_PATH"):
        return None
    return name


def _fence():
    global _fenced
    if _fenced:
        return
    _fenced = True
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(444, None, 0, 1)
        rights = (1 << 1) | ((1 << 14) if abi >= 3 else 0)  # WRITE_FILE, TRUNCATE
        attr = ctypes.c_uint64(rights)
        ruleset = libc.syscall(444, ctypes.byref(attr), 8, 0)
        if abi < 1 or ruleset < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset")

        class Beneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        parts = _GUARDED.strip("/").split("/")
        for depth in range(len(parts)):
            top = "/" + "/".join(parts[:depth])
            for name in os.listdir(top):
                if name == parts[depth] or (depth == 0 and name == "proc"):  # nor another process's memory
                    continue
                try:
                    fd = os.open(os.path.join(top, name), os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    beneath = Beneath(rights, fd)
                    if libc.syscall(445, ruleset, 1, ctypes.byref(beneath), 0):
                        raise OSError(ctypes.get_errno(), "landlock_add_rule " + name)
                finally:
                    os.close(fd)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        if libc.syscall(446, ruleset, 0):
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
        os.close(ruleset)
        null = os.open("/dev/null", os.O_WRONLY)
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink("/proc/self/fd/" + name).startswith(_GUARDED + "/"):
                    os.dup2(null, int(name))
            except OSError:
                pass
        os.close(null)
    except BaseException as err:
        os.write(2, ("rl-assets: cannot fence the reward files off this process (%s): stopping\n" % err).encode())
        os._exit(70)


def _audit(event, args):
    if event in _EVENTS and not _fenced:
        target = _library(args[0]) if event == "ctypes.dlopen" else args[0]
        path = getattr(target, "co_filename", target)
        if isinstance(path, (str, bytes)) and _untrusted(path):
            _fence()


def _wrap(cls, name, path_of):
    original = getattr(cls, name)

    def guarded(self, *args):
        if not _fenced and _untrusted(path_of(self, args)):
            _fence()
        return original(self, *args)

    setattr(cls, name, guarded)


try:
    if os.environ.get("RL_ASSETS_NOT_DUMPABLE"):  # so no other process in here can reach this one's memory
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0):  # PR_SET_DUMPABLE
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")
    _external = sys.modules["_frozen_importlib_external"]  # importlib's own, loaded at start: nothing to import
    _wrap(_external.FileLoader, "get_data", lambda self, args: args[0])
    _wrap(_external.ExtensionFileLoader, "create_module", lambda self, args: self.path)
    sys.addaudithook(_audit)
except BaseException as _err:
    os.write(2, ("rl-assets: the import guard did not load (%s): stopping\n" % _err).encode())
    os._exit(70)
'''
"""The verifier's ``sitecustomize``: a Python process fences the reward off itself before it runs the agent's code."""


def verify(shell: TaskShell, task: Task, answer: str = "", deadline: float | None = None) -> VerifierResult:
    """Run the task's ``tests/test.sh`` in ``shell``'s fork; its reward, or a :class:`VerifierError`.

    ``answer``, the agent's final message, is in ``/logs/agent/answer.txt`` (written here, on the trusted
    side, into a directory the agent never saw) for verifiers that grade what the agent said.
    ``deadline`` (``time.monotonic()``): the trial's; the verifier gets what is left of it if that is
    less than its ``[verifier] timeout_sec``, and none left is a :class:`VerifierTimeout`.
    """
    config = task.config
    bounds = reward_range(config.metadata)
    timeout_s, why = verifier_time(config.verifier.timeout_sec, deadline)
    neutralised = neutralise(shell)
    tests = shell.new_dir(copy_of=task.path / "tests", protected=True)
    agent_logs = shell.new_dir(protected=True)
    guard_dir = shell.new_dir(protected=True)  # the guard's own: read-only to the sandbox (watched, unprivileged)
    (guard_dir / "reward").mkdir(mode=0o755)
    # Every file the guard watches is written by a child process (see write_in_child), never from here.
    copy_bash = ' && cp -- /bin/bash "$4"' if shell.privileged else ""
    write_in_child(
        'cat > "$1" && printf %s "$2" > "$3"' + copy_bash,
        *(agent_logs / ANSWER_FILE, IMPORT_GUARD, guard_dir / "sitecustomize.py", guard_dir / "bash"),
        data=answer.encode("utf-8"),
    )
    (agent_logs / ANSWER_FILE).chmod(0o644)
    (guard_dir / "sitecustomize.py").chmod(0o644)
    bash = "/bin/bash"
    if shell.privileged:  # this side can still read a process that its neighbours cannot (see the module's doc)
        (guard_dir / "bash").chmod(0o111)  # runnable, not readable: the shell's process is not dumpable
        bash = VERIFIER_SHELL
    guard_dir.chmod(0o755)
    logs = shell.new_dir(protected=True)
    for name in (REWARD_JSON, REWARD_TXT):  # the reward files' names lead to the guard's FIFOs
        (logs / name).symlink_to(f"../..{SHELL_DIR}/reward/{name}")
    env = {**VERIFIER_ENV, **config.verifier.env}
    hooked = landlock_abi() > 0
    if hooked:
        env["PYTHONPATH"] = ":".join(filter(None, (SHELL_DIR, env.get("PYTHONPATH"))))
        if shell.privileged:  # as the shell: this side still reads it, the agent's programs cannot
            env[NOT_DUMPABLE] = "1"
    mounts = {"/tests": tests, "/logs/verifier": logs, "/logs/agent": agent_logs, SHELL_DIR: guard_dir}
    watched = {tests: "/tests", agent_logs: "/logs/agent", guard_dir: SHELL_DIR}
    guard = RewardGuard(shell.processes(), logs, guard_dir / "reward", watched, hooked, not_dumpable=shell.privileged)
    with guard:
        result = shell.run_phase(f"exec {bash} /tests/test.sh", timeout_s, mounts=mounts, env=env)
    if result.timed_out:
        raise VerifierTimeout(f"tests/test.sh ran past {why} and was killed", result.output)
    if guard.error is not None:
        raise VerifierError(f"the reward guard failed: {guard.error}", result.output)
    provenance = guard.provenance
    try:
        rewards = rewards_from(guard.read, bounds)
    except VerifierError as err:
        message = str(err) if provenance == PROVENANCE_VERIFIER else f"{err} ({provenance})"
        raise type(err)(message, result.output) from None
    return VerifierResult(
        reward=rewards["reward"],
        rewards=rewards,
        output=result.output,
        truncated=result.truncated,
        seconds=result.seconds,
        exit_code=result.exit_code,
        provenance=provenance,
        neutralised=neutralised,
    )


# -- the agent's final filesystem ------------------------------------------------------------------


def neutralise(shell: TaskShell) -> tuple[str, ...]:
    """Remove the links of the fork that leave it and its special files; what was removed, as the sandbox names it.

    Run between commands (no process of the attempt is alive, so nothing changes under the walk), from
    this side, through the keeper's view of the fork; nothing is followed.
    """
    root, workdir = shell.fork_view(), PurePosixPath(shell.workdir)
    found: list[tuple[Path, str]] = []  # all judged first, then removed: a chain of links is judged whole
    for top, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            host = Path(top) / name
            try:
                mode = os.lstat(host).st_mode
            except OSError:
                continue
            inside = workdir / host.relative_to(root)
            if stat.S_ISLNK(mode):
                target = os.readlink(host)
                if _escapes(root, workdir, inside, target):
                    found.append((host, f"{inside} -> {target}"))
            elif stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                found.append((host, f"{inside} ({_kind(mode)})"))
    for host, _ in found:
        _remove(host)
    removed = [what for _, what in found]
    if len(removed) > NEUTRALISED_SHOWN:
        removed[NEUTRALISED_SHOWN:] = [f"... and {len(removed) - NEUTRALISED_SHOWN} more"]
    return tuple(removed)


def _kind(mode: int) -> str:
    return "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"


def _remove(host: Path) -> None:
    try:
        host.unlink()
    except PermissionError:  # a directory the agent made read-only (an unprivileged launcher owns it)
        host.parent.chmod(host.parent.stat().st_mode | stat.S_IWUSR | stat.S_IXUSR)
        host.unlink()


def _escapes(root: Path, workdir: PurePosixPath, link: PurePosixPath, target: str) -> bool:
    """Whether the link at ``link`` (a sandbox path under ``workdir``) resolves outside the fork.

    Resolved as the kernel would in the sandbox, link by link, while inside the fork (``root`` is its host
    view); once outside, the rest is judged by its path: kept only under :data:`KEPT_LINKS`, with no ``..``.
    """
    parts = list(PurePosixPath(target).parts)
    current = list(link.parent.parts)
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "/":
            current = ["/"]
            continue
        if part in ("", "."):
            continue
        if part == "..":
            if len(current) > 1:
                current.pop()
            continue
        current.append(part)
        path = PurePosixPath(*current)
        if path.is_relative_to(workdir):
            host = root / path.relative_to(workdir)
            try:
                mode = os.lstat(host).st_mode
            except OSError:  # dangling inside the fork: harmless unless it climbs out past the missing part
                return ".." in parts
            if stat.S_ISLNK(mode):
                hops += 1
                if hops > 40:
                    return True
                current.pop()
                parts = [*PurePosixPath(os.readlink(host)).parts, *parts]
            continue
        if workdir.is_relative_to(path):
            continue  # on the way down to the working directory
        rest = PurePosixPath(*current, *parts)
        return ".." in rest.parts or not any(rest.is_relative_to(kept) for kept in KEPT_LINKS)
    return False


# -- the reward guard ------------------------------------------------------------------------------


class _Inotify:
    """The few calls of inotify(7) the guard needs, through libc."""

    def __init__(self) -> None:
        self.fd = _LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")

    def watch(self, path: Path, mask: int) -> int:
        wd = _LIBC.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        return wd

    def events(self) -> Iterable[tuple[int, int, str]]:
        """``(watch, mask, name)`` of every event queued so far."""
        while True:
            try:
                buffer = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(buffer):
                wd, mask, _, size = _EVENT.unpack_from(buffer, offset)
                name = buffer[offset + _EVENT.size : offset + _EVENT.size + size].split(b"\0", 1)[0]
                offset += _EVENT.size + size
                yield wd, mask, os.fsdecode(name)

    def close(self) -> None:
        """Closing an inotify instance waits out the kernel's grace period (tens of ms): not on the trial's time."""
        threading.Thread(target=os.close, args=(self.fd,), name="inotify-close", daemon=True).start()


@dataclass(eq=False)
class _Fifo:
    """One FIFO that has stood under a reward file's name; a name gets a fresh one at each let-through."""

    name: str
    handle: int
    """An ``O_PATH`` descriptor: the guard's way back to it once another FIFO has taken its name."""
    inode: tuple[int, int]
    ours_open: bool = False
    """The guard holds an end of it: opens seen now are its own and those of the processes it let through."""
    served: bool = False
    """Its openers were readers, given a copy of the reward so far: who else opens it no longer matters."""
    unexplained: bool = False
    """It was opened while the guard held no end of it: by a process the guard did not let through."""
    closed_writes: int = 0
    """Closes of a writing end of it (inotify, so several close together may count once)."""

    def reopen(self, flags: int) -> int:
        return os.open(f"/proc/self/fd/{self.handle}", flags | os.O_NONBLOCK | os.O_CLOEXEC)


@dataclass(eq=False)
class _Window:
    """Writers let through to one FIFO, no longer under its name: what they write comes to this side alone."""

    fifo: _Fifo
    openers: dict[tuple[int, int], WaitingOpen]
    """``(pid, tid)`` -> the open it was let through from."""
    fd: int
    """This side's reading end."""
    strangers: list[str] = field(default_factory=list)
    """The openers not trusted to write the reward, described while they waited (they may be gone by the end)."""
    others: list[str] = field(default_factory=list)
    """What else may have written to it: processes seen waiting to open for writing, or holding it."""
    data: bytearray = field(default_factory=bytearray)

    def passing(self, pid: int, tid: int, found: WaitingOpen, processes: SandboxProcesses) -> bool:
        """Whether the thread is one of the openers still waking from the very open it was let through from."""
        let_through = self.openers.get((pid, tid))
        return let_through is not None and let_through.call == found.call and not processes.holds(pid, self.fifo.inode)


@dataclass
class RewardGuard:
    """The harness's side of ``/logs/verifier/reward.{json,txt}`` while ``test.sh`` runs (see the module's doc).

    A context manager around the verifier's command: the FIFOs and watches are made on entry and a thread
    lets opens through while it runs; on exit :attr:`provenance` and :meth:`read` (for
    :func:`~rl_assets.tasks.verifier.rewards_from`) say what the shell wrote and whether anything else
    happened. ``watched``: host directory -> its path in the sandbox, whose present entries must not change.
    """

    processes: SandboxProcesses
    logs: Path
    """The host side of ``/logs/verifier``: its ``reward.*`` are links to the FIFOs' names."""
    fifos: Path
    """The host side of ``/run/rl-assets/reward``: the FIFOs, under the reward files' names."""
    watched: Mapping[Path, str]
    hooked: bool = False
    """The verifier's Python runs the import guard: a Python that test.sh's shell started may write the reward."""
    not_dumpable: bool = False
    """Launched as root: the shell and each Python with the guard are undumpable (a writer that is not: untrusted)."""
    error: BaseException | None = None
    flags: list[str] = field(default_factory=list)
    contents: dict[str, bytes | None] = field(default_factory=lambda: {REWARD_JSON: None, REWARD_TXT: None})

    def __post_init__(self) -> None:
        self._inotify = _Inotify()
        self._fifos: dict[int, _Fifo] = {}
        self._live: dict[str, _Fifo] = {}
        self._windows: list[_Window] = []
        self._renamed = dict.fromkeys(self.contents, 0)
        self._moved_in = dict.fromkeys(self.contents, 0)
        self._protected: dict[int, tuple[str, frozenset[str]]] = {}
        self._serial = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reward-guard", daemon=True)

    # -- the context ---------------------------------------------------------------------------------

    def __enter__(self) -> RewardGuard:
        try:
            for host, inside in self.watched.items():
                for top, dirs, _ in os.walk(host):
                    dirs[:] = [d for d in dirs if Path(top, d) != self.fifos]
                    wd = self._inotify.watch(Path(top), _CHANGED)
                    where = PurePosixPath(inside) / Path(top).relative_to(host)
                    self._protected[wd] = (str(where), frozenset(os.listdir(top)))
            self._links = {name: os.lstat(self.logs / name).st_ino for name in self.contents}
            names = _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO
            self._logs_wd = self._inotify.watch(self.logs, names | _CHANGED)
            self._fifos_wd = self._inotify.watch(self.fifos, names)
            for name in self.contents:
                self._place(name)
        except BaseException:
            self._close_all()
            raise
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()  # the command has ended: every process of it is gone
        self._thread.join()
        try:
            if self.error is None:
                self._drain()
                self._service(finishing=True)
                self._settle()
        finally:
            self._close_all()

    def _close_all(self) -> None:
        for window in self._windows:
            os.close(window.fd)
        for fifo in self._fifos.values():
            os.close(fifo.handle)
        self._windows.clear()
        self._fifos.clear()
        self._inotify.close()

    @property
    def provenance(self) -> str:
        if not self.flags:
            return PROVENANCE_VERIFIER
        more = len(self.flags) - FLAGS_SHOWN
        return FLAGGED + "; ".join(self.flags[:FLAGS_SHOWN] + ([f"and {more} more"] if more > 0 else []))

    def read(self, name: str) -> bytes | None:
        """What test.sh's shell wrote to ``/logs/verifier/<name>``, as a regular file would hold it; None if nothing."""
        return self.contents.get(name)

    def _flag(self, why: str) -> None:
        if why not in self.flags:
            self.flags.append(why)

    def _place(self, name: str) -> None:
        """A fresh FIFO under ``name``: the one it replaces is reachable now only by those already waiting on it."""
        self._serial += 1
        temporary = self.fifos / f".rl-assets-{self._serial}"
        os.mkfifo(temporary, 0o666)
        os.chmod(temporary, 0o666)
        handle = os.open(temporary, os.O_PATH | os.O_CLOEXEC)
        st = os.fstat(handle)
        fifo = _Fifo(name, handle, (st.st_dev, st.st_ino))
        self._fifos[self._inotify.watch(temporary, _IN_OPEN | _IN_CLOSE_WRITE)] = fifo
        os.rename(temporary, self.fifos / name)
        self._renamed[name] += 1
        self._live[name] = fifo

    # -- the watch -----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._drain()
                self._service()
                if self.processes.locate():
                    self._poll()
                self._stop.wait(POLL_S / 10 if self._windows else POLL_S)
        except BaseException as err:  # reported by verify(): a guard that failed vouches for nothing
            self.error = err

    def _waiting(self) -> dict[tuple[int, int], WaitingOpen]:
        """Every thread asleep in an open call, but those let through that have not yet woken from it."""
        waiting = {}
        for pid, tid in self.processes.tasks():
            found = self.processes.waiting_open(pid, tid)
            if found is not None and not any(w.passing(pid, tid, found, self.processes) for w in self._windows):
                waiting[(pid, tid)] = found
        return waiting

    def _poll(self) -> None:
        """Let through every process found waiting to open a reward file (by the name's current FIFO)."""
        waiting = self._waiting()
        for name in self.contents:
            fifo = self._live[name]
            openers = {task: found for task, found in waiting.items() if found.file == fifo.inode}
            if not openers:
                continue
            self._place(name)  # who waits on it now is all who ever can
            if not any(found.writes for found in openers.values()):  # readers: what was written
                self._drain()
                fifo.served = True
                self._serve(fifo)
                continue
            # A writer and a reader never both wait on one FIFO (each is the other's end). Anyone else waiting to
            # open something for writing may be waiting on this FIFO (the path it named may have changed since):
            # the window is then not the shell's alone. Nor if the FIFO has another name.
            live = {other.inode for other in self._live.values()}
            others = [
                f"{self.processes.describe(pid)}, waiting to open a file for writing"
                for (pid, tid), found in self._waiting().items()
                if found.writes and (pid, tid) not in openers and not (pid == SHELL_PID and found.file in live)
            ]
            if os.fstat(fifo.handle).st_nlink:
                others.append("another name for it")
            threads = collections.Counter(pid for pid, _ in self.processes.tasks())
            strangers = [  # judged while they wait: once let through they may be gone
                self.processes.describe(pid) for pid, _ in openers if not self._trusted(pid, threads[pid])
            ]
            self._drain()
            fifo.ours_open = True
            window = _Window(fifo, openers, fifo.reopen(os.O_RDONLY), strangers=strangers, others=others)
            self._windows.append(window)

    def _trusted(self, pid: int, threads: int) -> bool:
        """test.sh's shell; or, with the import guard, a Python the shell itself started with the guard loaded.

        Such a Python cannot open the reward once it is about to run code of the agent's (Landlock), so it
        waits on a FIFO only while it has run test.sh's code alone; one thread only (Landlock fences the
        thread that loads the agent's code, and what it starts), and, launched as root, undumpable (no
        program of the agent's can write its memory). Anything else (a program of the agent's, ``tee``, a
        Python started with ``-I``, ``-S`` or ``-E`` or by another program) is not trusted.
        """
        if pid == SHELL_PID:
            return True
        if not self.hooked or threads != 1 or self.processes.parent(pid) != SHELL_PID:
            return False
        if self.not_dumpable and not self.processes.undumpable(pid):
            return False
        if not _PYTHON.fullmatch(os.fsencode(os.path.basename(self.processes.exe(pid)))):
            return False
        if self.processes.environ(pid).get(b"PYTHONPATH", b"").split(b":")[0] != SHELL_DIR.encode():
            return False
        return _keeps_site(self.processes.cmdline(pid)[1:])

    def _serve(self, fifo: _Fifo) -> None:
        """Readers (``cat reward.txt``) get what the shell has written so far, then the end of the file."""
        fd = fifo.reopen(os.O_WRONLY)
        try:
            data, deadline = memoryview(self.contents[fifo.name] or b""), time.monotonic() + 1.0
            writable = select.poll()  # not select: a rollout run's worker holds more than select's 1024 fds
            writable.register(fd, select.POLLOUT)
            while data and time.monotonic() < deadline:
                with contextlib.suppress(BlockingIOError):
                    data = data[os.write(fd, data) :]
                writable.poll(POLL_S * 1000)
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    def _service(self, finishing: bool = False) -> None:
        """Read what the writers let through have written; settle each window once they are done with it."""
        for window in list(self._windows):
            done = window.fifo.closed_writes > 0  # (drained just before: their bytes came before their close)
            while True:
                try:
                    chunk = os.read(window.fd, 1 << 16)
                except BlockingIOError:
                    chunk = None
                if not chunk:
                    break
                window.data += chunk[: REWARD_FILE_BYTES + 1 - len(window.data)]
            if chunk == b"" and (done or finishing):
                self._windows.remove(window)
                self._drain()
                os.close(window.fd)
                window.fifo.ours_open = False
                self._settle_window(window)
            elif chunk is None:  # a writer holds it: does anyone else (a command the shell ran meanwhile)?
                openers = {pid for pid, _ in window.openers}
                for pid in self.processes.pids():
                    if pid not in openers and self.processes.holds(pid, window.fifo.inode):
                        window.others.append(f"{self.processes.describe(pid)}, holding it open")

    def _settle_window(self, window: _Window) -> None:
        path = f"/logs/verifier/{window.fifo.name}"
        for who in window.strangers:
            self._flag(f"{who}, not test.sh's shell, wrote {path}; its bytes were discarded")
        for who in dict.fromkeys(window.others):
            self._flag(f"{who} while {path} was written; the bytes were discarded")
        if window.fifo.unexplained:
            self._flag(f"{path} was opened by a process the guard did not let through; the bytes were discarded")
        if not window.strangers and not window.others and not window.fifo.unexplained and len(window.openers) == 1:
            [(_, writer)] = window.openers.items()
            self._write(window.fifo.name, bytes(window.data), os.O_TRUNC if writer.flags is None else writer.flags)
        elif not window.strangers and len(window.openers) > 1:
            self._flag(f"{path} was written by several processes at once; the bytes were discarded")

    def _write(self, name: str, data: bytes, flags: int) -> None:
        """What a regular file holds after the shell's open with ``flags`` and its ``data``."""
        old = self.contents[name] or b""
        if flags & os.O_TRUNC:
            new = data
        elif flags & os.O_APPEND:
            new = old + data
        else:
            new = data + old[len(data) :]
        self.contents[name] = new[: REWARD_FILE_BYTES + 1]

    def _drain(self) -> None:
        for wd, mask, name in self._inotify.events():
            if mask & _IN_Q_OVERFLOW:
                self._flag("the guard's event queue overflowed: what happened to the reward files is not known")
            elif wd in self._fifos:
                fifo = self._fifos[wd]
                fifo.unexplained |= bool(mask & _IN_OPEN) and not fifo.ours_open and not fifo.served
                fifo.closed_writes += bool(mask & _IN_CLOSE_WRITE)
            elif wd == self._fifos_wd and name in self.contents:
                if mask & _IN_MOVED_TO:
                    self._moved_in[name] += 1
                else:
                    self._flag(f"{SHELL_DIR}/reward/{name} was removed or replaced during the verifier")
            elif wd == self._logs_wd and name in self.contents:
                self._flag(f"/logs/verifier/{name} was removed or replaced during the verifier")
            elif wd in self._protected and name in self._protected[wd][1]:
                self._flag(f"{PurePosixPath(self._protected[wd][0], name)} was changed during the verifier")

    def _settle(self) -> None:
        """After the command: every open of every FIFO accounted for, and the names still the guard's FIFOs."""
        for fifo in self._fifos.values():
            if fifo.unexplained:
                self._flag(f"/logs/verifier/{fifo.name} was opened by a process the guard did not let through")
        for name, fifo in self._live.items():
            try:
                st = os.lstat(self.fifos / name)
                intact = (st.st_dev, st.st_ino) == fifo.inode and os.lstat(self.logs / name).st_ino == self._links[name]
            except OSError:
                intact = False
            if not intact or self._moved_in[name] > self._renamed[name]:
                self._flag(f"/logs/verifier/{name} was removed or replaced during the verifier")


def _keeps_site(arguments: list[bytes]) -> bool:
    """Whether Python's options (before its script, ``-c`` or ``-m``) leave ``site`` and ``PYTHONPATH`` in force."""
    skip = False
    for arg in arguments:
        if skip:
            skip = False
        elif arg in (b"-W", b"-X", b"--check-hash-based-pycs"):
            skip = True
        elif arg in (b"-", b"--", b"-c", b"-m") or not arg.startswith(b"-"):
            return True
        elif arg.startswith((b"-W", b"-X", b"--")):
            continue
        elif any(flag in arg[1:] for flag in b"ISE"):
            return False
        elif any(flag in arg[1:] for flag in b"cmWX"):  # -Bc, -um...: the rest is an argument
            return True
    return True


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none), which the import guard needs."""
    result = _LIBC.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return max(result, 0)


# -- the sandbox of an attempt, and the oracle -----------------------------------------------------


def task_shell(task: Task, fork: ForkLayout) -> TaskShell:
    """The sandbox for an attempt at ``task`` on ``fork``: its ``[environment]`` working directory and env."""
    environment = task.config.environment
    return TaskShell(fork, workdir=environment.workdir or DEFAULT_WORKDIR, env=environment.env)


def run_oracle(task: Task) -> OracleRun:
    """``solution/solve.sh`` as the agent on a fresh fork of the task's environment, then the verifier."""
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="rl-assets-oracle-"))
    solve = "not run"
    try:
        world = scratch / "world"
        shutil.copytree(task.path / "environment", world, symlinks=True)
        fork = ForkLayout(
            kind="overlay",
            lower=str(world),
            upper=str(scratch / "fork" / "upper"),
            work=str(scratch / "fork" / "work"),
            merged=str(scratch / "fork" / "merged"),
        )
        for d in (fork.upper, fork.work, fork.merged):
            Path(d).mkdir(parents=True)
        timeout_s = task.config.agent.timeout_sec or ORACLE_TIMEOUT_S
        with task_shell(task, fork) as shell:
            solution = shell.new_dir(copy_of=task.path / "solution")
            agent = shell.run_phase(
                "bash /solution/solve.sh", timeout_s, mounts={"/solution": solution}, env=task.config.solution.env
            )
            solve = f"timed out after {timeout_s:g}s" if agent.timed_out else f"exit {agent.exit_code}"
            verdict = verify(shell, task, answer=agent.output.strip())  # the oracle's last word: what it printed
        if verdict.flagged:
            error = f"RewardFlagged: the reward is not vouched for ({verdict.provenance})"
            return OracleRun(seconds=time.monotonic() - start, error=error, solve=solve)
        return OracleRun(seconds=time.monotonic() - start, reward=verdict.reward, solve=solve)
    except (VerifierError, TaskSandboxError, TaskSandboxUnavailable) as err:
        return OracleRun(seconds=time.monotonic() - start, error=f"{type(err).__name__}: {err}", solve=solve)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
