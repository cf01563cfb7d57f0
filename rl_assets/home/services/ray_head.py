"""The long-lived local Ray head of a home, which hosts the trainer actor.

The head outlives every driver and every run: that is what keeps the
trainer's actor (and its pid) the same across steps and across driver
crashes. Nobody but the home's owner can reach it:

- every listener is on 127.0.0.1. ``--node-ip-address=127.0.0.1`` alone is
  not enough: Ray rewrites a loopback address to the machine's address
  (``resolve_ip_for_localhost``) and then binds the GCS, raylet and workers to
  all interfaces and its agents to that address. With
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` Ray runs as a single-node local
  cluster: the node address stays loopback, and each server then binds
  loopback only. Drivers need the same variable, or they rewrite
  ``127.0.0.1:port`` to the machine's address too, so the home exports it;
- token authentication (``RAY_AUTH_MODE=token``) with a per-home token file
  (``services/ray.token``, 0600), whose path every process of the home is
  given: the GCS, raylet, agents and workers refuse a caller without it;
- no Ray client server (``ray start`` always starts one on port 10001, shared
  by every home on the machine): the ``RAY_START_HOOK`` below drops it. The
  trainer connects as a driver on the GCS address, which needs none. The
  dashboard is off; the dashboard agent and runtime-env agent cannot be
  turned off (the raylet starts them and needs them), so they stay, on
  loopback and behind the token;
- the head does not inherit the database password or any other secret: it
  never touches Postgres.

``ray start`` runs as the leader of a new session, and its daemons stay in
that session after it exits; the recorded session is the handle ``stop`` ends.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from rl_assets.domain.waiting import Waiting
from rl_assets.home.layout import Home
from rl_assets.home.services.private_files import ensure_secret
from rl_assets.home.services.processes import (
    Session,
    free_loopback_port,
    listening_sockets,
    port_is_open,
    wait_sockets_closed,
)

START_ATTEMPTS = 2
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|API_KEY|^DAGSTER_PG_")


def drop_client_server(ray_params: Any, head: bool) -> None:
    """``RAY_START_HOOK``: start the head without the Ray client server, which nothing here uses."""
    ray_params.ray_client_server_port = None


def client_env(home: Home) -> dict[str, str]:
    """What a process needs to reach the home's head: loopback addressing and the token's path."""
    return {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(home.services / "ray.token"),
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def head_env(home: Home) -> dict[str, str]:
    """The head's environment: ours without secrets, plus the client settings and the start hook."""
    env = {k: v for k, v in os.environ.items() if not _SECRET_NAME.search(k) and k != "RAY_AUTH_TOKEN"}
    return {**env, **client_env(home), "RAY_START_HOOK": f"{__name__}.{drop_client_server.__name__}"}


class LocalRayHead:
    """Start, reuse and stop the home's Ray head."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.address_file = home.services / "ray.address"
        self.session_file = home.services / "ray.session"
        self.token_file = home.services / "ray.token"
        self.temp_dir = home.runtime / "ray"

    def address(self) -> str | None:
        if not self.address_file.exists():
            return None
        return self.address_file.read_text().strip()

    def is_running(self) -> bool:
        address = self.address()
        return address is not None and port_is_open(int(address.rsplit(":", 1)[1]))

    def session(self) -> Session | None:
        return Session.load(self.session_file)

    def ensure_running(self) -> str:
        """The head's GCS address, starting the head if needed."""
        self.home.ensure()
        ensure_secret(self.token_file)
        if self.is_running():
            return self.address()  # type: ignore[return-value]
        port = self._previous_port() or free_loopback_port()
        ray_bin = str(Path(sys.executable).with_name("ray"))
        cmd = [
            ray_bin,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            # the agent's HTTP port defaults to 52365, one for every head on the machine
            f"--dashboard-agent-listen-port={free_loopback_port()}",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
            "--object-store-memory=100000000",
        ]
        for attempt in range(START_ATTEMPTS):
            if self._start(cmd):
                break
            if attempt == START_ATTEMPTS - 1:
                raise RuntimeError(f"ray start failed; see {self.home.logs / 'ray-start.log'}")
        Waiting(timeout_s=60, interval_s=0.2).value(
            lambda: port_is_open(port), lambda: RuntimeError("Ray head did not open its port within 60 s")
        )
        address = f"127.0.0.1:{port}"
        self.address_file.write_text(address)
        return address

    def _start(self, cmd: list[str]) -> bool:
        """One ``ray start``; on failure its session is ended, so a failed start leaves no process.

        On a loaded machine the raylet can give up waiting for its agents (a slow
        Python import); a second attempt then usually succeeds.
        """
        with open(self.home.logs / "ray-start.log", "ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=log,
                env=head_env(self.home),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            session = Session.led_by(proc.pid)
            session.save(self.session_file)
            if proc.wait() == 0:
                return True
        session.end()
        return False

    def _previous_port(self) -> int | None:
        """The port of the head's last life, if free: run workers keep the address they were given."""
        address = self.address()
        if address is None:
            return None
        port = int(address.rsplit(":", 1)[1])
        return None if port_is_open(port) else port

    def stop(self) -> bool:
        """End every process of the head's session and wait until its ports are closed; True if any ran."""
        session = self.session()
        if session is None:
            return False
        sockets = listening_sockets(port for _, port in session.listening_ports())
        ended = session.end()
        wait_sockets_closed(sockets)
        self.session_file.unlink(missing_ok=True)
        return bool(ended)
