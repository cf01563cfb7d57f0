"""A task's command run inside someone else's container (a pod, a Podman or Docker container), as the
trusted side drives and observes it, and the verifier's clean slate there.

Exec APIs (Kubernetes' and the container runtimes') have no timeout of their own, and killing the
client does not end what it started inside. So every command is run as
``timeout -k KILL_GRACE T env K=V... bash -c 'cd -- "$1" && exec bash -c "$2" 2>&1'``: coreutils'
``timeout`` kills the command's process group at ``T`` inside the container (exit 124, or 137 when
it had to kill). That is what a task's image must have besides ``bash``: ``timeout``, ``env`` and (for
the verifier's files) ``head``, ``tar`` and ``find``, as any Debian- or Ubuntu-based image does;
:data:`TOOLS_CHECK` says which one is missing before the agent starts.

Before the verifier, :func:`clear_for_verifier` kills every process the agent left (``kill -s KILL
-1`` signals all but the container's init and the caller), empties the directories the agent could
have planted files in (a ``conftest.py``, a reward file), then unpacks ``tests/`` (a tar stream on
the exec's stdin, :func:`tree_archive`) and the agent's final answer. :data:`READ_REWARD` reads a
reward file back refusing links and special files, for :func:`rl_assets.tasks.verifier.rewards_from`.
"""

from __future__ import annotations

import io
import math
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rl_assets.domain.models import VerifierOutcome
from rl_assets.sandbox.protocol import CommandResult
from rl_assets.sandbox.task_shell import OUTPUT_BYTES
from rl_assets.tasks.config import StepConfig
from rl_assets.tasks.steps import tests_dirs, verifier_settings
from rl_assets.tasks.task import Task
from rl_assets.tasks.verifier import (
    REWARD_FILE_BYTES,
    RewardFileUnsafe,
    VerifierError,
    VerifierTimeout,
    reward_range,
    rewards_from,
    verifier_time,
)

KILL_GRACE_S = 5
"""How long ``timeout`` waits after its TERM before it KILLs."""
TIMED_OUT_EXITS = (124, 137)
"""``timeout``'s status when it ended the command (TERM, or KILL after :data:`KILL_GRACE_S`)."""
RUN_IN_WORKDIR = 'cd -- "$1" && exec bash -c "$2" 2>&1'
"""``bash -c`` script: the working directory, then the command as its own ``bash -c`` with stderr on stdout.

As locally, the agent reads one stream in the order it was written."""
TOOLS_CHECK = "for t in bash timeout env head tar find; do command -v $t >/dev/null || echo $t; done"
READ_REWARD = f"""
f=/logs/verifier/$1
if [ -L "$f" ] || {{ [ -e "$f" ] && [ ! -f "$f" ]; }}; then exit 3; fi
[ -e "$f" ] || exit 4
exec head -c {REWARD_FILE_BYTES + 1} -- "$f"
"""
"""``bash -c`` script (``$1``: the file's name): exit 4 if absent, 3 if not a regular file, else its first bytes."""
REWARD_ABSENT, REWARD_NOT_REGULAR = 4, 3


def timed_argv(command: str, timeout_s: float, workdir: str, env: Mapping[str, str] | None = None) -> list[str]:
    """``command`` as the argv run inside the container: in ``workdir`` with ``env``, killed at ``timeout_s``."""
    seconds = max(1, math.ceil(timeout_s))
    pairs = [f"{name}={value}" for name, value in (env or {}).items()]
    return ["timeout", "-k", str(KILL_GRACE_S), str(seconds), "env", *pairs, "bash", "-c", RUN_IN_WORKDIR, "task"] + [
        workdir,
        command,
    ]


def timed_out(exit_code: int | None, elapsed_s: float, timeout_s: float) -> bool:
    """Whether ``timeout`` (not the command) ended a command that took ``elapsed_s``."""
    return exit_code in TIMED_OUT_EXITS and elapsed_s >= max(1, math.ceil(timeout_s))


def clear_for_verifier(scratch: tuple[str, ...]) -> str:
    """``bash -c`` script (``$1``: the tar stream's length, ``$2``: the agent's final message's): the verifier's
    clean slate in ``scratch`` (emptied, and checked empty), then its tests and the answer, both read from stdin
    (``head -c`` reads no further than it is told)."""
    dirs = " ".join(scratch)
    return f"""
kill -s KILL -1 2>/dev/null; kill -s KILL -1 2>/dev/null
for d in {dirs}; do
  mkdir -p "$d"; chmod -R u+rwX "$d" 2>/dev/null; find "$d" -mindepth 1 -delete 2>/dev/null
done
left=$(find {dirs} -mindepth 1 -print -quit 2>&1)
if [ -n "$left" ]; then echo "could not clear $left"; exit 3; fi
head -c "$1" | tar -x -f - -C /tests && mkdir -p /logs/verifier /logs/agent && head -c "$2" > /logs/agent/answer.txt
"""


def tree_archive(*trees: Path) -> bytes:
    """Directories as one tar stream (regular files and directories; owners and times left out); a later tree's
    file replaces an earlier one's of the same path when unpacked (a step's ``tests/`` over the task's)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for tree in trees:
            for path in sorted(tree.rglob("*")):
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(tree)))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                info.mode |= 0o600 if info.isfile() else 0o700
                if info.isfile():
                    with path.open("rb") as f:
                        tar.addfile(info, f)
                elif info.isdir():
                    tar.addfile(info)
    return buffer.getvalue()


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


class Exec(Protocol):
    """Runs an argv in a container through an exec API: its exit code and capped output, or an error of the
    caller's kind when no answer came within ``wait_s``."""

    def argv(
        self, argv: Sequence[str], wait_s: float, stdin: bytes | None = None, output_bytes: int = OUTPUT_BYTES
    ) -> tuple[int, CappedOutput]: ...


def timed_command(
    runner: Exec, command: str, timeout_s: float, workdir: str, env: Mapping[str, str] | None, reply_grace_s: float
) -> CommandResult:
    """``bash -c command`` in ``workdir`` with ``env`` added, killed at ``timeout_s`` inside the container (exit code
    ``None``); the exec itself is given up ``reply_grace_s`` after the kill."""
    wait_s = max(1, math.ceil(timeout_s)) + KILL_GRACE_S + reply_grace_s
    start = time.monotonic()
    exit_code, output = runner.argv(timed_argv(command, timeout_s, workdir, env), wait_s)
    elapsed = time.monotonic() - start
    killed = timed_out(exit_code, elapsed, timeout_s)
    return CommandResult(
        exit_code=None if killed else exit_code,
        output=output.text(),
        truncated=output.cut > 0,
        timed_out=killed,
        seconds=elapsed,
    )


@dataclass(frozen=True)
class ContainerVerifier:
    """The verifier of a task whose agent worked in a container: the clean slate, ``tests/test.sh``, the rewards.

    ``trusted`` runs the harness's own steps (as a user that may kill every process of the agent's and empty
    ``scratch``); ``verifier`` runs test.sh. ``failure`` is the caller's error for a slate that cannot be set up.
    """

    trusted: Exec
    verifier: Exec
    workdir: str
    scratch: tuple[str, ...]
    setup_wait_s: float
    reply_grace_s: float
    failure: type[Exception]
    where: str
    """What the slate's failure names (``task pod <name>``, ``container <name>``)."""

    def verify(
        self, task: Task, answer: str, deadline: float | None = None, step: StepConfig | None = None
    ) -> VerifierOutcome:
        """``tests/test.sh`` after the clean slate; of a multi-step task's ``step``, with the step's tests and
        settings (:mod:`rl_assets.tasks.steps`)."""
        bounds = reward_range(task.config.metadata)
        timeout_sec, env, _ = verifier_settings(task, step)
        timeout_s, why = verifier_time(timeout_sec, deadline)
        archive = tree_archive(*tests_dirs(task, step))
        said = answer.encode("utf-8")
        code, output = self.trusted.argv(
            ["bash", "-c", clear_for_verifier(self.scratch), "clear", str(len(archive)), str(len(said))],
            self.setup_wait_s,
            archive + said,
        )
        if code != 0:
            raise self.failure(f"{self.where}: the verifier's files could not be set up: {output.text()[:500]}")
        result = timed_command(self.verifier, "bash /tests/test.sh", timeout_s, self.workdir, env, self.reply_grace_s)
        if result.timed_out:
            raise VerifierTimeout(f"tests/test.sh ran past {why} and was killed", result.output)
        try:
            rewards = rewards_from(self._reward_file, bounds)
        except VerifierError as err:
            err.output = result.output
            raise
        return VerifierOutcome(reward=rewards["reward"], rewards=rewards, output=result.output)

    def _reward_file(self, name: str) -> bytes | None:
        code, output = self.trusted.argv(
            ["bash", "-c", READ_REWARD, "read", name], self.setup_wait_s, None, 4 * REWARD_FILE_BYTES
        )
        if code == REWARD_ABSENT:
            return None
        if code == REWARD_NOT_REGULAR:
            raise RewardFileUnsafe(f"/logs/verifier/{name}: not a regular file")
        if code != 0:
            raise RewardFileUnsafe(f"/logs/verifier/{name}: unreadable (exit {code})")
        return output.head + output.tail
