"""A Harbor verifier's reward, read from the host side of its ``/logs/verifier``, or a named error.

The test script writes ``reward.json`` (a flat object of finite numbers; training uses its ``reward``
key) or ``reward.txt`` (one number); the JSON is read first, as Harbor does. Each way of producing no
usable reward is its own :class:`VerifierError`, never a silent 0: a trial with a broken verifier must
look broken, not like an agent that failed. The directory's contents came from a sandboxed command that
ran code the agent wrote, so they are read as hostile: no link is followed, only regular files are
read, and no more than :data:`REWARD_FILE_BYTES`.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
REWARD_KEY = "reward"
REWARD_FILE_BYTES = 64 << 10


class VerifierError(RuntimeError):
    """The verifier produced no usable reward; ``output`` is its (capped) output, for the person debugging it."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


class VerifierTimeout(VerifierError):
    """The test script ran past ``[verifier] timeout_sec`` and was killed."""


class RewardFileMissing(VerifierError):
    """Neither ``reward.json`` nor ``reward.txt`` was written."""


class RewardFileEmpty(VerifierError):
    """The reward file exists but holds nothing (whitespace only)."""


class RewardFileUnsafe(VerifierError):
    """The reward file is a link, not a regular file, or over :data:`REWARD_FILE_BYTES`."""


class RewardParseError(VerifierError):
    """The reward file is not one number (``.txt``) or a flat JSON object of numbers (``.json``)."""


class RewardNotFinite(VerifierError):
    """A reward is NaN or infinite."""


class RewardKeyMissing(VerifierError):
    """``reward.json`` has no ``reward`` key."""


@dataclass(frozen=True)
class VerifierResult:
    """One verifier run: the training reward, every reward the file named, the capped output, its duration."""

    reward: float
    rewards: dict[str, float]
    output: str
    truncated: bool = False
    seconds: float = 0.0
    exit_code: int | None = None
    """``test.sh``'s exit status, for information: Harbor takes the reward from the file alone."""


def read_rewards(logs: Path) -> dict[str, float]:
    """The rewards in ``logs`` (the host side of ``/logs/verifier``), ``reward`` among them; or a VerifierError."""
    directory = os.open(logs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        return rewards_from(lambda name: _read(directory, name))
    finally:
        os.close(directory)


def rewards_from(read: Callable[[str], bytes | None]) -> dict[str, float]:
    """The rewards, given ``read(name)``: a reward file's first ``REWARD_FILE_BYTES + 1`` bytes, ``None`` if absent.

    Where the files are is the caller's business (a directory on this host, a pod read through the
    API); ``read`` raises :class:`RewardFileUnsafe` for an entry that is not a regular file. JSON
    first, as Harbor does.
    """
    data = read(REWARD_JSON)
    if data is not None:
        return _parse_json(_text(REWARD_JSON, data))
    data = read(REWARD_TXT)
    if data is not None:
        return {REWARD_KEY: _number(_text(REWARD_TXT, data).strip(), REWARD_TXT)}
    raise RewardFileMissing(f"the verifier wrote neither /logs/verifier/{REWARD_JSON} nor {REWARD_TXT}")


def _read(directory: int, name: str) -> bytes | None:
    """The file's first bytes, ``None`` if there is no entry of that name; a link or a special file is refused."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=directory)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP: a symbolic link
        raise RewardFileUnsafe(f"/logs/verifier/{name}: not a regular file ({err.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RewardFileUnsafe(f"/logs/verifier/{name}: not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(REWARD_FILE_BYTES + 1)
    finally:
        os.close(fd)


def _text(name: str, data: bytes) -> str:
    """A reward file's bytes as text, or the :class:`VerifierError` saying why they are not a reward."""
    if len(data) > REWARD_FILE_BYTES:
        raise RewardFileUnsafe(f"/logs/verifier/{name}: over {REWARD_FILE_BYTES} bytes")
    if not data.strip():
        raise RewardFileEmpty(f"/logs/verifier/{name}: empty")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RewardParseError(f"/logs/verifier/{name}: not UTF-8 text") from None


def _parse_json(text: str) -> dict[str, float]:
    try:
        data = json.loads(text)
    except ValueError as err:
        raise RewardParseError(f"/logs/verifier/{REWARD_JSON}: not JSON ({err})") from None
    if not isinstance(data, dict):
        raise RewardParseError(f"/logs/verifier/{REWARD_JSON}: not a JSON object")
    rewards = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RewardParseError(f"/logs/verifier/{REWARD_JSON}: {key[:100]!r} is not a number")
        rewards[key] = _finite(value, REWARD_JSON)
    if REWARD_KEY not in rewards:
        raise RewardKeyMissing(f"/logs/verifier/{REWARD_JSON}: no {REWARD_KEY!r} key")
    return rewards


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RewardParseError(f"/logs/verifier/{name}: not a number") from None
    return _finite(value, name)


def _finite(value: float, name: str) -> float:
    try:
        number = float(value)
    except OverflowError:  # an integer beyond a float's range
        number = math.inf
    if not math.isfinite(number):
        raise RewardNotFinite(f"/logs/verifier/{name}: {value!r:.40} is not a finite number")
    return number
