"""A Harbor verifier's reward, read from the host side of its ``/logs/verifier``, or a named error.

The test script writes ``reward.json`` (a flat object of finite numbers; training uses its ``reward``
key) or ``reward.txt`` (one number); the JSON is read first, as Harbor does. Each way of producing no
usable reward is its own :class:`VerifierError`, never a silent 0: a trial with a broken verifier must
look broken, not like an agent that failed. The directory's contents came from a sandboxed command that
ran code the agent wrote, so they are read as hostile: no link is followed, only regular files are
read, and no more than :data:`REWARD_FILE_BYTES`.

The training reward must lie in the task's declared range (:func:`reward_range`: ``[0, 1]`` unless
``[metadata.verifier] reward_range`` says otherwise, within :data:`REWARD_BOUND`): a reward outside it is
:class:`RewardOutOfRange`, a verifier failure, never training data, so no sum of rewards can overflow.

A result also says where its reward came from (:attr:`VerifierResult.provenance`): ``"verifier"`` when the
harness saw every byte of it written by ``test.sh``'s own shell and nothing touch the tests, otherwise
``"flagged: <why>"`` (see :mod:`rl_assets.sandbox.task_trial`).
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_assets.domain.models import PROVENANCE_VERIFIER, VerifierOutcome

REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
REWARD_KEY = "reward"
REWARD_FILE_BYTES = 64 << 10
DEFAULT_REWARD_RANGE = (0.0, 1.0)
"""A task's training reward unless its ``[metadata.verifier] reward_range = [low, high]`` declares another."""
REWARD_BOUND = 1e6
"""No declared range reaches past this magnitude: a step's sum of rewards stays far from a float's range."""
FLAGGED = "flagged: "
"""The prefix of a provenance that is not :data:`PROVENANCE_VERIFIER`: the platform cannot vouch for the reward."""


class VerifierError(RuntimeError):
    """The verifier produced no usable reward; ``output`` is its (capped) output, for the person debugging it."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


class VerifierTimeout(VerifierError):
    """The test script ran past ``[verifier] timeout_sec`` and was killed."""


def verifier_time(timeout_sec: float, deadline: float | None) -> tuple[float, str]:
    """(the seconds test.sh may run, why that many): its ``[verifier] timeout_sec``, or what is left of the
    trial's ``deadline`` (``time.monotonic()``) when that is less; none left is a :class:`VerifierTimeout`."""
    if deadline is None or deadline - time.monotonic() >= timeout_sec:
        return timeout_sec, f"{timeout_sec:g}s"
    left = deadline - time.monotonic()
    if left <= 0:
        raise VerifierTimeout("the trial's deadline passed before tests/test.sh could start")
    return left, "the trial's deadline"


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


class RewardOutOfRange(VerifierError):
    """The training reward is outside the task's declared range (or the task declares an unusable range)."""


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
    provenance: str = PROVENANCE_VERIFIER
    """:data:`PROVENANCE_VERIFIER`, or :data:`FLAGGED` and why the platform cannot vouch for the reward."""
    neutralised: tuple[str, ...] = ()
    """Links and special files of the agent's final filesystem removed before the verifier ran."""

    @property
    def flagged(self) -> bool:
        return self.provenance != PROVENANCE_VERIFIER

    def outcome(self) -> VerifierOutcome:
        """The record a trajectory keeps of this run."""
        return VerifierOutcome(
            reward=self.reward,
            rewards=self.rewards,
            output=self.output,
            provenance=self.provenance,
            neutralised=self.neutralised,
        )


def reward_range(metadata: Mapping[str, Any]) -> tuple[float, float]:
    """The task's training-reward range: ``[metadata.verifier] reward_range``, else :data:`DEFAULT_REWARD_RANGE`.

    A declared range must be two finite numbers ``low <= high`` within :data:`REWARD_BOUND`; anything else
    is :class:`RewardOutOfRange` (the task's verifier cannot be trusted to bound what it writes).
    """
    section = metadata.get("verifier")
    if not isinstance(section, Mapping) or "reward_range" not in section:
        return DEFAULT_REWARD_RANGE
    declared = section["reward_range"]
    numbers = (
        isinstance(declared, list | tuple)
        and len(declared) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in declared)
    )
    if numbers and all(math.isfinite(v) and abs(v) <= REWARD_BOUND for v in declared) and declared[0] <= declared[1]:
        return float(declared[0]), float(declared[1])
    raise RewardOutOfRange(
        f"[metadata.verifier] reward_range = {declared!r:.80}: not two finite numbers low <= high within "
        f"+-{REWARD_BOUND:g}"
    )


def read_rewards(logs: Path, bounds: tuple[float, float] = DEFAULT_REWARD_RANGE) -> dict[str, float]:
    """The rewards in ``logs`` (the host side of ``/logs/verifier``), ``reward`` among them; or a VerifierError."""
    directory = os.open(logs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        return rewards_from(lambda name: _read(directory, name), bounds)
    finally:
        os.close(directory)


def rewards_from(
    read: Callable[[str], bytes | None], bounds: tuple[float, float] = DEFAULT_REWARD_RANGE
) -> dict[str, float]:
    """The rewards, given ``read(name)``: a reward file's first ``REWARD_FILE_BYTES + 1`` bytes, ``None`` if absent.

    Where the files are is the caller's business (a directory on this host, a pod read through the
    API, the harness's own reward channel); ``read`` raises :class:`RewardFileUnsafe` for an entry that
    is not a regular file. JSON first, as Harbor does. The training reward must be within ``bounds``
    (the task's :func:`reward_range`).
    """
    data = read(REWARD_JSON)
    if data is not None:
        rewards, name = _parse_json(_text(REWARD_JSON, data)), REWARD_JSON
    else:
        data = read(REWARD_TXT)
        if data is None:
            raise RewardFileMissing(f"the verifier wrote neither /logs/verifier/{REWARD_JSON} nor {REWARD_TXT}")
        rewards, name = {REWARD_KEY: _number(_text(REWARD_TXT, data).strip(), REWARD_TXT)}, REWARD_TXT
    low, high = bounds
    if not low <= rewards[REWARD_KEY] <= high:
        raise RewardOutOfRange(
            f"/logs/verifier/{name}: reward {rewards[REWARD_KEY]:.6g} is outside the task's range [{low:g}, {high:g}]"
        )
    return rewards


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
        keys = ", ".join(repr(key[:40]) for key in sorted(rewards)[:5]) or "none"
        raise RewardKeyMissing(
            f"/logs/verifier/{REWARD_JSON}: no {REWARD_KEY!r} key (it has {keys}): "
            f"training needs one number, so test.sh must write {REWARD_KEY!r} too (e.g. the mean of the others)"
        )
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
