"""A test-only :class:`~rl_assets.sandbox.protocol.Shell`: ``bash -c`` in a directory, no isolation at all.

It keeps the protocol's contract that the agent's tests rely on (the working directory, a clean
environment, a kill at the timeout that takes the command's children too, capped output), and
nothing of a sandbox: it is for running the chat agent against a temp directory in tests, never
for untrusted commands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from rl_assets.sandbox.protocol import CommandResult

OUTPUT_CHARS = 16_000
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}


class LocalShell:
    """Runs each command in ``workdir`` in a new session, killed (session and all) at its timeout."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def run(self, command: str, timeout_s: float) -> CommandResult:
        start = time.monotonic()
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.workdir,
            env=CLEAN_ENV,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = process.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, _ = process.communicate()
            timed_out = True
        text = out.decode("utf-8", errors="replace")
        truncated = len(text) > OUTPUT_CHARS
        if truncated:
            half = OUTPUT_CHARS // 2
            text = f"{text[:half]}\n[... output cut ...]\n{text[-half:]}"
        return CommandResult(
            exit_code=None if timed_out else process.returncode,
            output=text,
            truncated=truncated,
            timed_out=timed_out,
            seconds=time.monotonic() - start,
        )
