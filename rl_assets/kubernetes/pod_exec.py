"""One command in a running pod through the Kubernetes exec API, as the trusted side observes it.

The official client's ``stream(connect_get_namespaced_pod_exec, ...)`` opens a websocket to the
API server, which relays it to the kubelet: channel 0 is the command's stdin, 1 its stdout, 2 its
stderr, and 3 carries, once the command has ended, a ``Status`` whose cause is the exit code. The
frames are read here directly (not through the client's per-channel buffers), so stdout and stderr
stay interleaved in the order they arrived and only :data:`~rl_assets.sandbox.task_shell.OUTPUT_BYTES`
of them are kept, the head and the tail, however much the command prints.

The exec API has no timeout, working directory or environment of its own, so every command is run
as ``timeout -k KILL_GRACE T env K=V... bash -c 'cd -- "$1" && exec bash -c "$2" 2>&1'``: coreutils'
``timeout`` kills the command's process group at ``T`` (exit 124, or 137 when it had to kill), and
if the answer still has not come :data:`REPLY_GRACE_S` later the stream is closed and the attempt
fails (:class:`PodExecError`). That is what a task's image must have besides ``bash``: ``timeout``,
``env`` and (for the verifier's files) ``head``, ``tar`` and ``find``, as any Debian- or
Ubuntu-based image does; :data:`TOOLS_CHECK` says which one is missing before the agent starts.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubernetes import client
from kubernetes.stream import stream
from websocket import ABNF, WebSocketConnectionClosedException, WebSocketTimeoutException

from rl_assets.sandbox.protocol import CommandResult
from rl_assets.sandbox.task_shell import OUTPUT_BYTES

STDIN, STDOUT, STDERR, STATUS = 0, 1, 2, 3
KILL_GRACE_S = 5
"""How long ``timeout`` waits after its TERM before it KILLs."""
REPLY_GRACE_S = 30.0
"""How long past a command's kill the exit status may take to arrive before the attempt fails."""
TIMED_OUT_EXITS = (124, 137)
"""``timeout``'s status when it ended the command (TERM, or KILL after :data:`KILL_GRACE_S`)."""
STDIN_CHUNK = 1 << 20
RUN_IN_WORKDIR = 'cd -- "$1" && exec bash -c "$2" 2>&1'
"""``bash -c`` script: the working directory, then the command as its own ``bash -c`` with stderr on stdout.

As locally, the agent reads one stream in the order it was written: the exec API's two channels are read
from two pipes, so their relative order is only the order in which the kubelet happened to read them."""
TOOLS_CHECK = "for t in bash timeout env head tar find; do command -v $t >/dev/null || echo $t; done"


class PodExecError(RuntimeError):
    """The exec stream failed, or the pod did not answer: the attempt is over."""


@dataclass
class CappedOutput:
    """A command's output as it arrives: its first and last ``limit // 2`` bytes, and how many were cut."""

    limit: int = OUTPUT_BYTES
    head: bytes = b""
    tail: bytes = b""
    cut: int = 0

    def add(self, data: bytes) -> None:
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head, data = self.head + data[:room], data[room:]
        keep = self.limit - self.limit // 2
        combined = self.tail + data
        self.cut += max(0, len(combined) - keep)
        self.tail = combined[-keep:] if keep else b""

    def text(self) -> str:
        """The kept output as text, the cut marked as the local sandbox marks it."""
        marker = f"\n[... {self.cut} bytes of output cut ...]\n".encode() if self.cut else b""
        return (self.head + marker + self.tail).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class PodExec:
    """Runs commands in one container of one pod."""

    core: client.CoreV1Api
    namespace: str
    pod: str
    container: str

    def command(
        self,
        command: str,
        timeout_s: float,
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        output_bytes: int = OUTPUT_BYTES,
    ) -> CommandResult:
        """``bash -c command`` in ``workdir`` with ``env`` added, killed at ``timeout_s`` (exit code ``None``)."""
        seconds = max(1, math.ceil(timeout_s))
        pairs = [f"{name}={value}" for name, value in (env or {}).items()]
        argv = ["timeout", "-k", str(KILL_GRACE_S), str(seconds), "env", *pairs]
        argv += ["bash", "-c", RUN_IN_WORKDIR, "task", workdir, command]
        start = time.monotonic()
        exit_code, output = self.argv(argv, seconds + KILL_GRACE_S + REPLY_GRACE_S, stdin, output_bytes)
        elapsed = time.monotonic() - start
        timed_out = exit_code in TIMED_OUT_EXITS and elapsed >= seconds
        return CommandResult(
            exit_code=None if timed_out else exit_code,
            output=output.text(),
            truncated=output.cut > 0,
            timed_out=timed_out,
            seconds=elapsed,
        )

    def argv(
        self, argv: Sequence[str], wait_s: float, stdin: bytes | None = None, output_bytes: int = OUTPUT_BYTES
    ) -> tuple[int, CappedOutput]:
        """Run ``argv`` as is; its exit code and capped output, or :class:`PodExecError` after ``wait_s``."""
        try:
            ws = stream(
                self.core.connect_get_namespaced_pod_exec,
                self.pod,
                self.namespace,
                container=self.container,
                command=list(argv),
                stdin=stdin is not None,
                stdout=True,
                stderr=True,
                tty=False,
                binary=True,
                _preload_content=False,
            )
        except client.ApiException as err:
            raise PodExecError(f"exec in pod {self.pod} failed: {err.reason}") from None
        try:
            for offset in range(0, len(stdin or b""), STDIN_CHUNK):
                ws.write_stdin(stdin[offset : offset + STDIN_CHUNK])
            output = CappedOutput(output_bytes)
            status = self._read(ws.sock, time.monotonic() + wait_s, output)
        finally:
            ws.close()
        return _exit_code(status, self.pod), output

    def _read(self, sock, deadline: float, output: CappedOutput) -> bytes:
        """Output frames into ``output`` until the server closes the stream; the status channel's bytes.

        :class:`PodExecError` if the stream has not ended by ``deadline``.
        """
        status = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PodExecError(f"pod {self.pod} did not report the command's end in time")
            sock.settimeout(min(left, 5.0))
            try:
                opcode, frame = sock.recv_data_frame(True)
            except WebSocketTimeoutException:
                continue
            except WebSocketConnectionClosedException:
                return status
            if opcode == ABNF.OPCODE_CLOSE:
                return status
            if opcode in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) and frame.data:
                channel, data = frame.data[0], bytes(frame.data[1:])
                if channel == STATUS:
                    status += data[:4096]
                elif channel in (STDOUT, STDERR):
                    output.add(data)


def _exit_code(status: bytes, pod: str) -> int:
    """The exit code in the exec's final ``Status``: 0 on Success, the ``ExitCode`` cause otherwise."""
    try:
        parsed = json.loads(status)
    except ValueError:
        raise PodExecError(f"pod {pod}: the exec stream ended without an exit status") from None
    if parsed.get("status") == "Success":
        return 0
    for cause in (parsed.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause["message"])
    raise PodExecError(f"exec in pod {pod} failed: {str(parsed.get('message', parsed))[:300]}")
