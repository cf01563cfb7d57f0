"""The exec endpoint of the fake API server: a stand-in for the API server, the kubelet and a container.

It speaks what a real API server speaks to the ``kubernetes`` client's ``stream()``: an HTTP
upgrade to a websocket with the ``v4.channel.k8s.io`` subprotocol, then binary frames whose first
byte is the channel (0 stdin from the client; 1 stdout, 2 stderr and 3 the final ``Status`` from
the server), then a close frame. The frames are written and parsed here (RFC 6455), not by a
websocket library, so the client's side is what is tested.

The "container" is a stand-in: each exec runs its command as a real process in bubblewrap, with
this machine's system directories read-only in place of the image, and the pod's volumes (the
fork PVC's directory, its empty volumes) bound where the pod spec mounts them, in the container's
working directory and env. Every exec is a fresh pid namespace (``--unshare-pid`` is mandatory:
commands such as ``kill -s KILL -1`` must only reach their own processes), so unlike a real
container nothing an exec starts survives it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import selectors
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from rl_assets.sandbox.bubblewrap import bubblewrap

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PROTOCOL = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, STATUS = 0, 1, 2, 3
OP_BINARY, OP_CLOSE, OP_PING = 0x2, 0x8, 0x9
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def handshake(headers: Mapping[str, str], wfile: BinaryIO) -> bool:
    """Answer the upgrade (101, ``v4.channel.k8s.io``); ``False`` (and a 400) if the client does not offer v4."""
    offered = [p.strip() for p in headers.get("Sec-WebSocket-Protocol", "").split(",")]
    if PROTOCOL not in offered or "Sec-WebSocket-Key" not in headers:
        wfile.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        return False
    accept = base64.b64encode(hashlib.sha1((headers["Sec-WebSocket-Key"] + GUID).encode()).digest()).decode()
    wfile.write(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n".encode()
    )
    return True


def send_frame(wfile: BinaryIO, opcode: int, payload: bytes) -> None:
    """One unmasked, final frame (a server never masks)."""
    n = len(payload)
    if n < 126:
        header = bytes([0x80 | opcode, n])
    elif n < 1 << 16:
        header = bytes([0x80 | opcode, 126]) + n.to_bytes(2, "big")
    else:
        header = bytes([0x80 | opcode, 127]) + n.to_bytes(8, "big")
    wfile.write(header + payload)


def _exactly(rfile: BinaryIO, n: int) -> bytes:
    data = rfile.read(n)
    if len(data) != n:
        raise EOFError
    return data


def read_frame(rfile: BinaryIO) -> tuple[int, bytes]:
    """One frame from the client (which must mask): ``(opcode, payload)``; ``EOFError`` when the peer is gone."""
    first, second = _exactly(rfile, 2)
    opcode, length = first & 0x0F, second & 0x7F
    if length == 126:
        length = int.from_bytes(_exactly(rfile, 2), "big")
    elif length == 127:
        length = int.from_bytes(_exactly(rfile, 8), "big")
    if not second & 0x80:
        raise ValueError("a client frame must be masked")
    mask = _exactly(rfile, 4)
    payload = _exactly(rfile, length)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def status(exit_code: int) -> dict[str, Any]:
    """The ``Status`` the API server sends on channel 3 when the command has ended."""
    if exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {exit_code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
    }


def container_argv(pod: dict[str, Any], volumes: Mapping[str, Path], command: list[str]) -> list[str]:
    """bubblewrap standing in for the pod's container: its volumes, working directory and env."""
    container = pod["spec"]["containers"][0]
    argv = [bubblewrap().path, "--unshare-all", "--unshare-pid", "--die-with-parent", "--new-session"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for path in SYSTEM:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for mount in container.get("volumeMounts", []):
        argv += ["--bind", str(volumes[mount["name"]]), mount["mountPath"]]
    argv += ["--chdir", container.get("workingDir", "/"), "--clearenv", "--setenv", "PATH", PATH]
    for var in container.get("env", []):
        argv += ["--setenv", var["name"], var["value"]]
    assert "--unshare-pid" in argv, "an exec must never share this machine's pid namespace"
    return [*argv, "--", *command]


def serve_exec(rfile: BinaryIO, wfile: BinaryIO, argv: list[str]) -> int:
    """Run ``argv``, relaying stdin from the client and stdout/stderr to it; then the status and a close frame."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    gone = threading.Event()

    def relay_stdin() -> None:
        try:
            while True:
                opcode, payload = read_frame(rfile)
                if opcode == OP_CLOSE:
                    break
                if opcode == OP_BINARY and payload[:1] == bytes([STDIN]):
                    proc.stdin.write(payload[1:])
                    proc.stdin.flush()
        except (EOFError, OSError, ValueError):
            pass
        finally:
            gone.set()
            try:
                proc.stdin.close()
            except OSError:
                pass

    reader = threading.Thread(target=relay_stdin, daemon=True)
    reader.start()
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, STDOUT)
    selector.register(proc.stderr, selectors.EVENT_READ, STDERR)
    open_streams = 2
    try:
        while open_streams:
            for key, _ in selector.select(timeout=0.2):
                data = os.read(key.fileobj.fileno(), 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                send_frame(wfile, OP_BINARY, bytes([key.data]) + data)
            if gone.is_set() and proc.poll() is None:  # the client hung up: the command dies with its stream
                os.killpg(proc.pid, signal.SIGKILL)
        exit_code = proc.wait()
        if exit_code < 0:
            exit_code = 128 - exit_code
        send_frame(wfile, OP_BINARY, bytes([STATUS]) + json.dumps(status(exit_code)).encode())
        send_frame(wfile, OP_CLOSE, (1000).to_bytes(2, "big"))
    except OSError:  # the client closed first
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        exit_code = proc.wait()
    finally:
        selector.close()
        proc.stdout.close()
        proc.stderr.close()
    return exit_code
