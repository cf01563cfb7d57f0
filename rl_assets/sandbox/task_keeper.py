"""The task sandbox's keeper: holds one attempt's fork for a whole session of commands, runs each in bubblewrap.

A task attempt is many commands (the agent's, then the verifier) on one fork, so unlike the rollout's
keeper this one does not exit after one sandbox: it sets up once and then serves commands until its
stdin closes. Forked for :mod:`rl_assets.sandbox.task_shell` by the keeper zygote (:func:`.keeper.serve`,
which has imported this module once: an interpreter started per attempt cost about 35 ms of CPU), standard
library only, plus the rollout keeper beside it, whose mount helpers it reuses. As root of its own user and
mount namespaces (and of nothing else) it mounts, in its private mount namespace only:

- the fork: an overlay of the sealed world whose upper dir is the size-limited quota tmpfs (or the
  copy), *adopted* by the sandbox's uid (owner and ``u+w`` on every entry, which copies the world up
  into the quota: tasks' plain-file environments are small), so an agent may edit what it was given,
  as root in Harbor's container may, while the world underneath is never written;
- the agent's ``/dev/shm``, a directory on that quota (so the fork's writes and it share its size), and
  a second size-limited tmpfs, the attempt's ``/tmp``, both kept across the agent's commands (a trusted
  phase gets a fresh ``/tmp`` and ``/dev/shm`` of that size instead); bubblewrap's own ``/dev`` is
  read-only, so no tmpfs a command can write is unsized, whoever launched the attempt;
- the machine's system directories, read-only, and a minimal ``/etc`` (a few files a base image has,
  and a ``passwd`` naming the sandbox's uid: never the host's ``/etc`` with its service configs).

Each command is then a fresh ``bwrap``: new user, pid, network, ipc, uts and cgroup namespaces, uid
1000, no capability, the seccomp filter, the attempt's rlimits. Its pid namespace dies with its
``bash`` (bubblewrap's init is pid 1 there), so nothing a command starts outlives it; this process is
the subreaper of all of it and replies only once every descendant is reaped. Per-command mounts
(``/solution``, ``/tests``, ``/logs/verifier``) are directories the launcher made under ``base``
after the agent's commands, bound for that one command only.

Protocol: the launcher writes one JSON config line (after the uid maps), this process answers
``ready`` (or an error), then one JSON request line per command, one JSON reply line each.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import stat
import subprocess
import sys
import time

if __package__:
    from rl_assets.sandbox import keeper
else:  # imported by the zygote (``python -I -S keeper.py --serve``), which put its own directory on the path
    import keeper

_MNT_DETACH = 2
SECCOMP_FD = 5
"""Where each bubblewrap finds the seccomp program (``--seccomp 5``)."""
SECCOMP_RECEIVED = 3
"""Where the forked keeper finds the seccomp program the launcher sent (its config's ``seccomp_fd``)."""
DRAIN_S = 5.0
"""After a timeout kill, how long the output pipe may take to close (the pid namespace dying)."""


def _adopt(root: str, uid: int) -> None:
    """Make every entry of the fork the sandbox uid's and writable by it (an overlay copies each one up)."""
    for top, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(top, name)
            os.lchown(path, uid, uid)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode):
                os.chmod(path, stat.S_IMODE(mode) | stat.S_IRWXU if stat.S_ISDIR(mode) else stat.S_IMODE(mode) | 0o600)
    os.lchown(root, uid, uid)
    os.chmod(root, 0o755)


def _minimal_etc(stage: str, uid: int) -> list[str]:
    """A ``passwd`` and ``group`` naming root and the commands' uid, written into the stage, bound read-only."""
    args = []
    for name, text in (
        ("passwd", f"root:x:0:0:root:/root:/bin/bash\nagent:x:{uid}:{uid}:agent:/tmp:/bin/bash\n"),
        ("group", f"root:x:0:\nagent:x:{uid}:\n"),
    ):
        with open(os.path.join(stage, name), "w") as f:
            f.write(text)
        args += ["--ro-bind", os.path.join(keeper.STAGE_POINT, name), f"/etc/{name}"]
    return args


def setup(config: dict) -> list[str]:
    """Mount the fork, the attempt's ``/tmp`` and the system files; the bubblewrap arguments common to commands."""
    keeper._mount("none", "/", None, keeper._MS_REC | keeper._MS_PRIVATE)
    base = config["base"]
    stage = os.path.join(base, "stage")
    keeper._mount("rl-assets-stage", stage, "tmpfs", keeper._MS_NOSUID | keeper._MS_NODEV, "size=1m,mode=0755")
    keeper._fork(config, config["sandbox_uid"])
    _adopt(os.path.join(stage, "fork"), config["sandbox_uid"])
    tmp = os.path.join(stage, "tmp")
    os.mkdir(tmp)
    options = f"size={config['tmp_bytes']},nr_inodes=4096,mode=1777"
    keeper._mount("rl-assets-tmp", tmp, "tmpfs", keeper._MS_NOSUID | keeper._MS_NODEV, options)
    config["base_fd"] = os.open(base, os.O_PATH | os.O_DIRECTORY)  # the stage is about to hide /tmp
    keeper.stage_tool(base, config["tool"])
    config["shm_args"] = keeper._stage_shm(base)
    args = [*config["bwrap"], *keeper._stage(base, config["binds"]), *_minimal_etc(stage, config["command_uid"])]
    for target, link in config["symlinks"]:
        args += ["--symlink", target, link]
    keeper._mount(stage, keeper.STAGE_POINT, None, keeper._MS_MOVE)
    return [*args, "--bind", os.path.join(keeper.STAGE_POINT, "fork"), config["workdir"]]


def _argv(config: dict, common: list[str], request: dict, points: list[str]) -> list[str]:
    argv = list(common)
    if request["fresh_tmp"]:
        argv += ["--size", str(config["tmp_bytes"]), "--tmpfs", "/tmp"]
        argv += ["--size", str(config["tmp_bytes"]), "--perms", "1777", "--tmpfs", "/dev/shm"]
    else:
        argv += ["--bind", os.path.join(keeper.STAGE_POINT, "tmp"), "/tmp", *config["shm_args"]]
    for point, (_, dest) in zip(points, request["mounts"], strict=True):
        argv += ["--bind", point, dest]
    for name, value in request["env"].items():
        argv += ["--setenv", name, value]
    return [*argv, "--chdir", config["workdir"], "--remount-ro", "/", "--", *request["argv"]]


def _mount_per_command(config: dict, request: dict, serial: int) -> list[str]:
    """Bind each of the command's own directories (named relative to ``base``) into the stage.

    Only a trusted phase (the oracle, the verifier) has any; being bind mounts, their roots in its ``mountinfo``
    are their host paths (the attempt's directory). An agent's command's mount table names no host path."""
    points = []
    for i, (rel, _) in enumerate(request["mounts"]):
        if "/" in rel or rel in (".", ".."):
            raise ValueError(f"per-command mount {rel!r} is not a name in the attempt's directory")
        point = os.path.join(keeper.STAGE_POINT, f"c{serial}-{i}")
        os.mkdir(point)
        points.append(point)
        keeper._mount(f"/proc/self/fd/{config['base_fd']}/{rel}", point, None, keeper._MS_BIND | keeper._MS_REC)
    return points


def _unmount(points: list[str]) -> None:
    for point in points:
        if keeper._LIBC.umount2(point.encode(), _MNT_DETACH) == 0:
            os.rmdir(point)


class _Capture:
    """The output's first and last ``cap // 2`` bytes, and how many there were in all."""

    def __init__(self, cap: int) -> None:
        self.half = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        del self.tail[: max(0, len(self.tail) - self.half)]


def run_command(config: dict, common: list[str], request: dict, serial: int) -> dict:
    """One command in a fresh bubblewrap; killed at its timeout. The reply comes once all of it is reaped."""
    points = _mount_per_command(config, request, serial)
    read_fd, write_fd = os.pipe()

    def limit() -> None:
        os.dup2(config["seccomp_fd"], SECCOMP_FD)
        os.lseek(SECCOMP_FD, 0, os.SEEK_SET)  # every bubblewrap reads the program whole, from the start
        for name, value in request["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))

    try:
        proc = subprocess.Popen(
            _argv(config, common, request, points),
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            user=config["bwrap_uid"],
            group=config["bwrap_uid"],
            extra_groups=[] if config["bwrap_uid"] else None,
            preexec_fn=limit,
            pass_fds=(SECCOMP_FD,),
        )
    finally:
        os.close(write_fd)
    capture = _Capture(request["output_bytes"])
    deadline = time.monotonic() + request["timeout_s"]
    timed_out = False
    with os.fdopen(read_fd, "rb", buffering=0) as out:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if timed_out:
                    break  # the pipe outlived the kill by DRAIN_S: reaping below still waits for every process
                timed_out = True
                proc.kill()  # bubblewrap's init dies with it (--die-with-parent), and its pid namespace with that
                deadline = time.monotonic() + DRAIN_S
                continue
            if select.select([out], [], [], left)[0]:
                chunk = out.read(65536)
                if not chunk:
                    break
                capture.add(chunk)
    status = proc.wait()
    keeper._reap_all()
    _unmount(points)
    return {
        "exit": None if timed_out else status,
        "timed_out": timed_out,
        "head": capture.head.decode(errors="replace"),
        "tail": capture.tail.decode(errors="replace"),
        "cut": capture.total - len(capture.head) - len(capture.tail),
    }


def main() -> int:
    keeper._LIBC.prctl(keeper._PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if keeper._LIBC.unshare(keeper._CLONE_NEWUSER | keeper._CLONE_NEWNS):
        print(json.dumps({"error": f"unshare: {os.strerror(ctypes.get_errno())}"}), flush=True)
        return 1
    print("unshared", flush=True)
    config = json.loads(sys.stdin.readline())  # sent once the launcher has written our uid and gid maps
    try:
        common = setup(config)
    except Exception as err:  # reported: the launcher refuses the attempt with it
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}), flush=True)
        return 1
    print(json.dumps({"ready": True}), flush=True)
    for serial, line in enumerate(sys.stdin):
        try:
            reply = run_command(config, common, json.loads(line), serial)
        except Exception as err:  # reported: that command fails, the launcher closes the attempt
            reply = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(reply), flush=True)
    return 0  # stdin closed: the mounts vanish with this namespace


FORKED = keeper.Kind(fds=(0, 1, SECCOMP_RECEIVED), death_signal=signal.SIGKILL, main=main)
"""As the zygote forks this keeper: its stdin, stdout and the seccomp program in place; killed with the zygote
(its commands' pid namespaces die with their bubblewraps, whose parent it is)."""
