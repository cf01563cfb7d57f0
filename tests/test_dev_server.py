"""``rl-assets dev`` ends every process it started on SIGTERM and on Ctrl-C (SIGINT).

A real Dagster webserver (and its code server) is started through the CLI,
waited for until its UI answers, and signalled; every process of its tree and
of its session must then be gone within a bound, and its port free. The
home's Postgres, Ray head and daemon are the home's, not ``dev``'s: they stay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from rl_assets.home import Home
from rl_assets.services.daemon import LocalDaemon
from rl_assets.services.dev_server import DevServer
from rl_assets.services.processes import free_loopback_port, port_is_open

UI_DEADLINE_S = 300.0
STOP_BOUND_S = 45.0


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _unix_sockets(procs) -> set[str]:
    """Filesystem paths of the listening unix sockets of ``procs`` (abstract ones have no path)."""
    found = set()
    for proc in procs:
        try:
            found |= {c.laddr for c in proc.net_connections("unix") if c.laddr and not c.laddr.startswith("\0")}
        except psutil.Error:
            continue
    return {p for p in found if p.startswith("/")}


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_dev_ends_everything_it_started(home: Path, stop_signal: signal.Signals) -> None:
    port = free_loopback_port()
    LocalDaemon(Home(home)).ensure_running()  # the home's, started before dev: not one of dev's processes
    dev = subprocess.Popen(
        [sys.executable, "-m", "rl_assets.cli", "dev", "--home", str(home), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + UI_DEADLINE_S
        while not _answers(port):
            assert dev.poll() is None, f"rl-assets dev exited {dev.returncode}: {dev.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, f"the UI did not answer within {UI_DEADLINE_S:.0f} s"
            time.sleep(0.5)
        session = DevServer(Home(home)).session()
        assert session is not None
        started = {p.pid: p for p in psutil.Process(dev.pid).children(recursive=True)}
        started.update((p.pid, p) for p in session.members())
        names = " ".join(" ".join(p.cmdline()) for p in started.values() if _alive(p))
        assert "dagster" in names and ("code-server" in names or "grpc" in names), names

        for path in _unix_sockets(started.values()):
            st = os.stat(Path(path).parent)
            assert st.st_uid == os.geteuid() and st.st_mode & 0o077 == 0, f"socket {path} is in a shared directory"

        os.kill(dev.pid, stop_signal)
        dev.wait(timeout=STOP_BOUND_S)
        left_deadline = time.monotonic() + 5
        while (left := [pid for pid, p in started.items() if _alive(p)]) and time.monotonic() < left_deadline:
            time.sleep(0.1)
        assert not left, f"left after {stop_signal.name}: {[(pid, started[pid].cmdline()[:3]) for pid in left]}"
        assert not session.members()
        assert not port_is_open(port)
        assert dev.returncode == 0, dev.stderr.read()[-3000:]
        gcs_port = int(os.environ["RL_ASSETS_RAY_ADDRESS"].rsplit(":", 1)[1])
        for name, service_port in (("Postgres", int(os.environ["DAGSTER_PG_PORT"])), ("Ray head", gcs_port)):
            assert port_is_open(service_port), f"the home's {name} belongs to the home: dev must leave it running"
        assert LocalDaemon(Home(home)).process() is not None, "dev starts the home's daemon and leaves it running"
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
        DevServer(Home(home)).stop()
