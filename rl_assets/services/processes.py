"""Small process helpers shared by the service managers."""

from __future__ import annotations

import os
import socket

import psutil


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    """True for a live, non-zombie process."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def process_identity(pid: int) -> str:
    """``pid@start-time``: names a process uniquely, even after its pid is reused."""
    return f"{pid}@{psutil.Process(pid).create_time():.2f}"


def identity_alive(identity: str) -> bool:
    """True while the process named by :func:`process_identity` runs."""
    pid, _, started = identity.partition("@")
    if not pid_alive(int(pid)):
        return False
    return not started or f"{psutil.Process(int(pid)).create_time():.2f}" == started


def processes_mentioning(marker: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``marker`` (a path unique to a home)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] == os.getpid():
            continue
        if any(marker in part for part in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def kill_all(procs: list[psutil.Process], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL whatever is still alive after ``timeout``."""
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=timeout)
