"""Start and stop the stand-in model server (:mod:`rl_assets_testkit.model_server`) as a real process.

``with ServedModel(script, tmp_dir) as server:`` yields once the server listens (it prints its port
when bound, so there is nothing to poll), and leaves no process behind, also when the test fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

STOP_WAIT_S = 10.0


class ServedModel:
    """One server process for one script; ``base_url`` ends in ``/v1``."""

    def __init__(self, script: dict[str, Any], directory: Path) -> None:
        self.script_path = directory / "model-script.json"
        self.script_path.write_text(json.dumps(script), encoding="utf-8")
        self._process: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return None if self._process is None else self._process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ServedModel:
        command = [sys.executable, "-m", "rl_assets_testkit.model_server", "--port", "0"]
        self._process = subprocess.Popen(
            [*command, "--script", str(self.script_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()  # the bound port, or "" if the server died first
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"the model server did not start: {line!r}")
        self.port = int(line)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Terminate the process and wait for it (killing it if it does not stop)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()

    def stats(self) -> dict[str, Any]:
        """``{"answered": {model: n}, "faults": {kind: n}}`` as the server counted them."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as answer:
            return json.load(answer)
