"""The home's policy server as a service: started on demand, found by every trial, ended by ``rl-assets stop``.

Experiments with ``--policy local`` are served by one process per home
(:mod:`rl_assets.workloads.grpo.serving`). Whatever needs it first starts it: ``train`` before it plans,
and every rollout attempt of such an experiment (so a server that died, SIGKILLed or out of memory, is
back for the trial's next attempt without anyone watching it). It leads a session of its own
(``services/policy.session``), listens on 127.0.0.1 only, and answers only the home's policy key
(``services/policy.key``, 0600, made on first use): the sandboxes have no network, and another local
user has no key.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from dataclasses import dataclass

from rl_assets.home.layout import Home, HomeError
from rl_assets.home.services.private_files import ensure_secret
from rl_assets.home.services.processes import Session, file_lock
from rl_assets.home.services.service_environment import service_environment

START_TIMEOUT_S = 120.0
"""How long the server may take to import torch and bind its port (a loaded 2-core machine is slow)."""


@dataclass(frozen=True)
class PolicyAddress:
    """Where the home's policy server answers, and the key it wants."""

    base_url: str
    api_key: str
    pid: int


def policy_key(home: Home) -> str:
    """The bearer token of the home's policy server, created on first use."""
    return ensure_secret(home.services / "policy.key")


class LocalPolicyServer:
    """Start, find and stop the home's policy server."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.session_file = home.services / "policy.session"
        self.address_file = home.services / "policy.json"

    def session(self) -> Session | None:
        return Session.load(self.session_file)

    def ensure_running(self) -> PolicyAddress:
        """The running server's address, started (in this process's environment) if it is not running."""
        with file_lock(self.home.services / "policy.lock"):
            session = self.session()
            leader = session.running_leader() if session is not None else None
            if leader is not None and self.address_file.exists():
                recorded = json.loads(self.address_file.read_text())
                if recorded["pid"] == leader.pid:
                    return self._address(recorded["port"], leader.pid)
            if session is not None:
                session.end()
            return self._start()

    def _address(self, port: int, pid: int) -> PolicyAddress:
        return PolicyAddress(f"http://127.0.0.1:{port}/v1", policy_key(self.home), pid)

    def _start(self) -> PolicyAddress:
        policy_key(self.home)
        cmd = [sys.executable, "-m", "rl_assets.workloads.grpo.serving", "--home", str(self.home.root)]
        env = service_environment(self.home, "policy")
        with open(self.home.logs / "policy-server.log", "ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        Session.led_by(proc.pid).save(self.session_file)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline() if ready else b""
        proc.stdout.close()  # the server prints its port once, then nothing
        if not line.strip().isdigit():
            Session.led_by(proc.pid).end()
            self.session_file.unlink(missing_ok=True)
            raise HomeError(
                f"the home's policy server did not start within {START_TIMEOUT_S:g}s; "
                f"see {self.home.logs / 'policy-server.log'}"
            )
        port = int(line)
        self.address_file.write_text(json.dumps({"port": port, "pid": proc.pid}))
        return self._address(port, proc.pid)

    def stop(self) -> bool:
        """End the server's session; True if it was running."""
        session = self.session()
        ended = session.end() if session is not None else []
        self.session_file.unlink(missing_ok=True)
        self.address_file.unlink(missing_ok=True)
        return bool(ended)
