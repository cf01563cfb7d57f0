"""A hostile rollout: runs *as the rollout*, inside the real sandbox (bound as ``/app/main.py``), test-only.

It reads ``/app/attack.json`` (``{"name": ..., "params": {...}}``; in the task sandbox, the file its command
names), tries that escape for real (syscalls through ctypes, files, sockets, processes), and writes what it
observed into ``answer.txt`` (the one channel the harness reads back, capped), so a test can check from
outside both the host's state and what the sandbox saw. Standard library only, like any rollout.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import sys
import time

LIBC = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
MS_REMOUNT, MS_BIND = 0x20, 0x1000
SYS_MOUNT_SETATTR, SYS_CLONE3 = 442, 435
CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS = 0x10000000, 0x40000000, 0x00020000
PTRACE_ATTACH = 16


class MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def outcome(ret: int) -> str:
    """``ok`` or the errno's name of a libc call."""
    return "ok" if ret == 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def try_write(path: str) -> str:
    try:
        with open(path, "w") as f:
            f.write("escaped")
        return "written"
    except OSError as err:
        return errno.errorcode.get(err.errno, str(err.errno))


def try_read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return "read:" + f.read(200).decode(errors="replace")
    except OSError as err:
        return errno.errorcode.get(err.errno, str(err.errno))


def mount_setattr(params: dict) -> dict:
    attr = MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
    ret = LIBC.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
    return {"mount_setattr": outcome(ret), "writes": {p: try_write(p) for p in params["targets"]}}


def remount(params: dict) -> dict:
    seen = {
        "remount_rw": outcome(LIBC.mount(None, b"/", None, MS_REMOUNT | MS_BIND, None)),
        "tmpfs": outcome(LIBC.mount(b"x", b"/fork", b"tmpfs", 0, None)),
        "umount": outcome(LIBC.umount2(b"/fork", 2)),
    }
    return {**seen, "writes": {p: try_write(p) for p in params["targets"]}}


def write_outside(params: dict) -> dict:
    return {"writes": {p: try_write(p) for p in params["targets"]}}


def read_world_directly(params: dict) -> dict:
    listing = os.listdir("docs") if os.path.isdir("docs") else None
    return {"listing": listing, "reads": {p: try_read(p) for p in params["files"]}}


def read_secrets(params: dict) -> dict:
    return {"reads": {p: try_read(p) for p in params["files"]}}


def connect_tcp(params: dict) -> dict:
    seen = {}
    for port in params["ports"]:
        s = socket.socket()
        s.settimeout(2)
        seen[str(port)] = errno.errorcode.get(s.connect_ex(("127.0.0.1", port)), "connected")
        s.close()
    return {"connect": seen}


def connect_unix(params: dict) -> dict:
    seen = {}
    for path in params["sockets"]:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(2)
        seen[path] = errno.errorcode.get(s.connect_ex(path), "connected")
        s.close()
    return {"connect": seen}


def ptrace(params: dict) -> dict:
    pid = params["pid"]
    return {
        "ptrace": outcome(LIBC.ptrace(PTRACE_ATTACH, pid, None, None)),
        "ptrace_self_child": outcome(LIBC.ptrace(PTRACE_ATTACH, 1, None, None)),
        "kill": outcome(LIBC.kill(pid, 9)),
        "proc_visible": os.path.exists(f"/proc/{pid}/environ"),
    }


def namespaces(params: dict) -> dict:
    seen = {name: outcome(LIBC.unshare(flag)) for name, flag in (("user", CLONE_NEWUSER), ("net", CLONE_NEWNET))}
    seen["mount"] = outcome(LIBC.unshare(CLONE_NEWNS))
    # clone(2) with CLONE_NEWUSER: the raw syscall, so libc's wrapper cannot hide it (x86_64: number 56)
    ret = LIBC.syscall(56, CLONE_NEWUSER | 17, None, None, None, None)  # 17 = SIGCHLD
    if ret == 0:
        os._exit(0)
    seen["clone_newuser"] = "ok" if ret > 0 else outcome(ret)
    args = (ctypes.c_uint64 * 11)(CLONE_NEWUSER, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)
    ret = LIBC.syscall(SYS_CLONE3, ctypes.byref(args), ctypes.sizeof(args))
    if ret == 0:
        os._exit(0)
    seen["clone3_newuser"] = "ok" if ret > 0 else outcome(ret)
    return seen


def fork_bomb(params: dict) -> dict:
    forked, error = 0, ""
    for _ in range(params["tries"]):
        try:
            if os.fork() == 0:
                time.sleep(3600)
                os._exit(0)
            forked += 1
        except OSError as err:
            error = errno.errorcode.get(err.errno, str(err.errno))
            break
    return {"forked": forked, "error": error}


def fill_fork(params: dict) -> dict:
    written, error = 0, ""
    chunk = b"x" * (1 << 20)
    try:
        for i in range(params["mib"]):
            with open(f"fill_{i:04d}.bin", "wb") as f:
                f.write(chunk)
            written += 1
    except OSError as err:
        error = errno.errorcode.get(err.errno, str(err.errno))
    for name in os.listdir("."):  # leave room for the observation
        if name.startswith("fill_") and name > "fill_0003":
            os.remove(name)
    return {"written_mib": written, "error": error}


def _meminfo_mib() -> dict[str, int]:
    """The host's memory (``/proc/meminfo`` is the machine's, also inside the sandbox), in MiB."""
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {name: int(fields[name].split()[0]) >> 10 for name in ("Shmem", "MemAvailable")}


def fill_tmpfs(params: dict) -> dict:
    """Fill every writable directory given with 1 MiB files, all held at once; how far each got, and how much of the
    host's shared memory (tmpfs pages) it held at the peak. The files are removed before the answer is written."""
    chunk = b"t" * (1 << 20)
    before = _meminfo_mib()
    written, errors, made = {}, {}, []
    for target in params["targets"]:
        written[target], errors[target] = 0, ""
        try:
            for i in range(params["mib"]):
                path = os.path.join(target, f"rl_fill_{i:05d}.bin")
                with open(path, "wb") as f:
                    made.append(path)
                    f.write(chunk)
                written[target] += 1
        except OSError as err:
            errors[target] = errno.errorcode.get(err.errno, str(err.errno))
    after = _meminfo_mib()
    for path in made:
        try:
            os.remove(path)
        except OSError:
            pass
    held = {name: after[name] - before[name] for name in after}
    return {"written_mib": written, "error": errors, "shmem_mib": held["Shmem"], "available_mib": held["MemAvailable"]}


def read_mounts(params: dict) -> dict:
    """The lines of the mount tables that name the marker (a piece of the host path of the home and the fork)."""
    seen = {}
    for path in ("/proc/mounts", "/proc/self/mountinfo", "/proc/1/mountinfo"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError as err:
            seen[path] = errno.errorcode.get(err.errno, str(err.errno))
            continue
        hits = [line for line in lines if params["marker"] in line]
        seen[path] = [line[max(0, line.index(params["marker"]) - 100) :][:150] for line in hits[:2]]
    return seen


def print_flood(params: dict) -> dict:
    chunk = "y" * (1 << 20) + "\n"
    for _ in range(params["mib"]):
        sys.stdout.write(chunk)
    sys.stdout.flush()
    return {"printed_mib": params["mib"]}


def forged_result(params: dict) -> dict:
    print(params["line"], flush=True)
    return {}


def import_grader(params: dict) -> dict:
    seen = {}
    for module in params["modules"]:
        try:
            __import__(module)
            seen[module] = "imported"
        except ImportError as err:
            seen[module] = type(err).__name__
    seen["paths"] = {p: os.path.exists(p) for p in params["paths"]}
    seen["root"] = sorted(os.listdir("/"))
    seen["site_packages"] = [p for p in sys.path if os.path.isdir(p) and "site-packages" in p and os.listdir(p)]
    return seen


def observe(params: dict) -> dict:
    s = socket.socket()
    s.settimeout(1)
    return {
        "connect": s.connect_ex(("1.1.1.1", 80)),
        "ifaces": sorted(n for _, n in socket.if_nameindex()),
        "env": dict(os.environ),
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "ids": [os.getuid(), os.geteuid(), os.getgid()],
        "cap_eff": next(line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")),
        "no_new_privs": next(line.split()[1] for line in open("/proc/self/status") if line.startswith("NoNewPrivs")),
        "seccomp": next(line.split()[1] for line in open("/proc/self/status") if line.startswith("Seccomp:")),
    }


def write_files(params: dict) -> dict:
    for name, size in params["files"].items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "w") as f:
            f.write("z" * size)
    return {}


def sleep_forever(params: dict) -> dict:
    time.sleep(3600)
    return {}


ATTACKS = {f.__name__: f for f in (
    mount_setattr, remount, write_outside, read_world_directly, read_secrets, connect_tcp, connect_unix, ptrace,
    namespaces, fork_bomb, fill_fork, fill_tmpfs, read_mounts, print_flood, forged_result, import_grader, observe,
    write_files, sleep_forever,
)}  # fmt: skip


def main() -> int:
    with open(sys.argv[1] if len(sys.argv) > 1 else "/app/attack.json") as f:  # a task's command names it
        attack = json.load(f)
    sys.stdin.readline()  # the task, unused: a hostile rollout does what it likes
    seen = ATTACKS[attack["name"]](attack["params"])
    if attack["name"] != "write_files":  # that one leaves exactly the files it was told to
        with open("answer.txt", "w") as f:
            f.write(json.dumps(seen)[:1000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
