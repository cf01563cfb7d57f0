"""The chat agent's tools, every one a command run through the trial's :class:`~rl_assets.sandbox.protocol.Shell`.

``read_file`` and ``write_file`` could be done by the trusted worker on the fork's files directly; they
are commands instead (``cat``, and a base64 heredoc) so that they are exactly as sandboxed as ``bash``:
a path is resolved inside the sandbox, symlinks and all, never by the trusted side.

A tool never raises at the model: bad arguments, an unknown tool, a failing command all come back as
the tool message's text, so the model can correct itself. Texts hold no timings, so the transcript is a
function of the server's answers.
"""

from __future__ import annotations

import base64
import json
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from rl_assets.domain.transcripts import ToolCall
from rl_assets.sandbox.protocol import CommandResult, Shell

MAX_WRITE_BYTES = 64 * 1024
"""``write_file``'s content travels base64-encoded inside the ``bash -c`` argument, which Linux caps
at 128 KiB (MAX_ARG_STRLEN); 64 KiB of content stays well under it."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class BashArgs(_Strict):
    command: str


class ReadFileArgs(_Strict):
    path: str


class WriteFileArgs(_Strict):
    path: str
    content: str


def _schema(name: str, description: str, properties: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string", "description": d} for p, d in properties.items()},
                "required": list(properties),
                "additionalProperties": False,
            },
        },
    }


TOOLS: tuple[dict[str, Any], ...] = (
    _schema(
        "bash",
        "Run a shell command with bash in the task's working directory; returns its exit code and output.",
        {"command": "The command line to run."},
    ),
    _schema("read_file", "Read a text file.", {"path": "The file's path, relative to the working directory."}),
    _schema(
        "write_file",
        "Create or overwrite a text file (its parent directories are created).",
        {"path": "The file's path, relative to the working directory.", "content": "The file's entire content."},
    ),
)
"""What the model is offered, in the Chat Completions ``tools`` shape."""


def cap(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, its head and tail kept and the cut marked."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[len(text) - tail :]}"


def _shown(result: CommandResult) -> str:
    status = "timed out (killed)" if result.timed_out or result.exit_code is None else f"exit code {result.exit_code}"
    return f"{status}\n{result.output}"


def run_tool(call: ToolCall, shell: Shell, timeout_s: float) -> str:
    """The tool message's text for ``call``, its command run in ``shell`` for at most ``timeout_s``."""
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as err:
        return f"error: the arguments of {call.name} are not valid JSON ({err.msg} at position {err.pos})"
    try:
        if call.name == "bash":
            return run_command(BashArgs.model_validate(args).command, shell, timeout_s)
        if call.name == "read_file":
            path = ReadFileArgs.model_validate(args).path
            result = shell.run(f"cat -- {shlex.quote(path)}", timeout_s)
            return result.output if result.exit_code == 0 else f"error: cannot read {path}\n{_shown(result)}"
        if call.name == "write_file":
            return _write(WriteFileArgs.model_validate(args), shell, timeout_s)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in err.errors())
        return f"error: invalid arguments for {call.name}: {problems}"
    return f"error: no tool named {call.name!r} (the tools are bash, read_file and write_file)"


def run_command(command: str, shell: Shell, timeout_s: float) -> str:
    """A shell command's result as the model is told it (exit code, then output): ``bash``'s, and the text
    protocol's fenced block's."""
    return _shown(shell.run(command, timeout_s))


def _write(args: WriteFileArgs, shell: Shell, timeout_s: float) -> str:
    data = args.content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        return f"error: content of {len(data)} bytes is over write_file's limit of {MAX_WRITE_BYTES}; split it"
    path = shlex.quote(args.path)
    encoded = base64.b64encode(data).decode("ascii")
    command = f"mkdir -p -- \"$(dirname -- {path})\" && base64 -d > {path} <<'EOF'\n{encoded}\nEOF"
    result = shell.run(command, timeout_s)
    if result.exit_code != 0:
        return f"error: cannot write {args.path}\n{_shown(result)}"
    return f"wrote {len(data)} bytes to {args.path}"
