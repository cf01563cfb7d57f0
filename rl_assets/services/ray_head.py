"""The long-lived local Ray head of a home, which hosts the trainer actor.

The head outlives every driver and every run: that is what keeps the
trainer's actor (and its pid) the same across steps and across driver
crashes. It listens on 127.0.0.1, without dashboard, and is stopped by
``rl-assets stop``, which kills exactly the processes of this home's head
(found by its private temp dir), never another Ray on the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rl_assets.home import Home
from rl_assets.services.processes import (
    free_loopback_port,
    kill_all,
    port_is_open,
    processes_mentioning,
)

RAY_ADDRESS_ENV = "RL_ASSETS_RAY_ADDRESS"


class LocalRayHead:
    """Start, reuse and stop the home's Ray head."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.address_file = home.services / "ray.address"
        self.temp_dir = home.runtime / "ray"

    def address(self) -> str | None:
        if not self.address_file.exists():
            return None
        return self.address_file.read_text().strip()

    def is_running(self) -> bool:
        address = self.address()
        return address is not None and port_is_open(int(address.rsplit(":", 1)[1]))

    def ensure_running(self) -> str:
        """The head's GCS address, starting the head if needed."""
        self.home.ensure()
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
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
            "--object-store-memory=100000000",
        ]
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        with open(self.home.logs / "ray-start.log", "ab") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=log, env=env, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start failed; see {self.home.logs / 'ray-start.log'}")
        deadline = time.monotonic() + 60
        while not port_is_open(port):
            if time.monotonic() > deadline:
                raise RuntimeError("Ray head did not open its port within 60 s")
            time.sleep(0.2)
        address = f"127.0.0.1:{port}"
        self.address_file.write_text(address)
        return address

    def _previous_port(self) -> int | None:
        """The port of the head's last life, if free: run workers keep the address they were given."""
        address = self.address()
        if address is None:
            return None
        port = int(address.rsplit(":", 1)[1])
        return None if port_is_open(port) else port

    def stop(self) -> bool:
        """Kill this home's head processes; True if any were running."""
        procs = processes_mentioning(str(self.temp_dir))
        kill_all(procs)
        return bool(procs)
