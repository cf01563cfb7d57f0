"""The home's API keys: one 0600 file each, named by the experiments that use them, read when used.

A key never travels through an environment: the daemon keeps the environment of
whichever command started it, so a key taken from there would be the first
caller's, for every experiment, until a restart. Instead an experiment names its
key (``--policy-key-name``, ``--judge-key-name``), and the worker reads the file
each time it opens a client, so replacing a key takes effect on the next trial
with nothing restarted. Files are created exclusively, never through a link,
and refused unless they are the owner's alone (:mod:`rl_assets.home.services.private_files`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from rl_assets.domain.names import API_KEY_NAME_PATTERN, InvalidNameError, check_api_key_name
from rl_assets.home.layout import Home, ensure_private_dir
from rl_assets.home.services.private_files import read_secret, write_secret
from rl_assets.home.settings import settings

MAX_KEY_BYTES = 4096


class ApiKeyError(ValueError):
    """A key name that is malformed or names no stored key; the message says how to store it."""


def check_key_name(name: str) -> str:
    """``name`` if it is a key name, else :class:`ApiKeyError`."""
    try:
        return check_api_key_name(name)
    except InvalidNameError as err:
        raise ApiKeyError(f"an API key name {err}") from None


class ApiKeys:
    """The keys of one home, under ``<home>/secrets/`` (0700)."""

    def __init__(self, home: Home) -> None:
        self.root = home.secrets

    def _path(self, name: str) -> Path:
        return self.root / check_key_name(name)

    def store(self, name: str, value: str) -> None:
        """Store (or replace) a key: written to a new 0600 file, then renamed over the old one."""
        value = value.strip()
        if not value or len(value.encode()) > MAX_KEY_BYTES or any(c in value for c in "\r\n\0"):
            raise ApiKeyError(f"an API key is one line of 1 to {MAX_KEY_BYTES} bytes")
        path = self._path(name)
        ensure_private_dir(self.root)
        staged = self.root / f".{name}.{os.getpid()}.new"
        staged.unlink(missing_ok=True)
        write_secret(staged, value)
        os.replace(staged, path)

    def read(self, name: str) -> str:
        """The key's current value; :class:`ApiKeyError` naming the command that stores it if there is none."""
        path = self._path(name)
        try:
            return read_secret(path)
        except FileNotFoundError:
            raise ApiKeyError(
                f"no API key named {name!r} in this home: store it with `rl-assets keys set {name}` "
                "(it reads the key from stdin)"
            ) from None

    def names(self) -> list[str]:
        """The stored keys' names (never their values)."""
        if not self.root.is_dir():
            return []
        stored = [p for p in self.root.iterdir() if re.fullmatch(API_KEY_NAME_PATTERN, p.name)]
        return sorted(p.name for p in stored if stat.S_ISREG(os.lstat(p).st_mode))

    def remove(self, name: str) -> bool:
        """Forget a key; False if there was none."""
        try:
            self._path(name).unlink()
        except FileNotFoundError:
            return False
        return True


def home_api_keys(home: Path) -> Callable[[str], str] | None:
    """How a worker reads a named key: from the home's files locally; None on Kubernetes, where a key is a
    Secret the pod's environment carries (``RL_ASSETS_POLICY_API_KEY``, ``RL_ASSETS_JUDGE_API_KEY``)."""
    return None if settings().env == "kubernetes" else ApiKeys(Home(home)).read
