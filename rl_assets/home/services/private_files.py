"""Secrets of a home: created once, exclusively, readable by their owner only.

``O_CREAT|O_EXCL|O_NOFOLLOW`` with mode 0600 means a secret is never written
through a link someone planted, never appended to a file someone else
created, and never readable by anyone else, not even for an instant.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


def write_secret(path: Path, value: str, owner: int | None = None) -> None:
    """Create ``path`` 0600 with ``value``; fails if it exists. ``owner``: chown the new file (by fd)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        if owner is not None:
            os.fchown(fd, owner, -1)
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def read_secret(path: Path) -> str:
    """A secret's value, refused if the file is not ours alone (a link, another owner, group/other bits)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise PermissionError(f"{path} must be a regular file of yours with mode 0600")
        return os.read(fd, 4096).decode().strip()
    finally:
        os.close(fd)


def ensure_secret(path: Path, nbytes: int = 32) -> str:
    """The secret stored at ``path``, generated on first use."""
    try:
        write_secret(path, secrets.token_hex(nbytes))
    except FileExistsError:
        pass
    return read_secret(path)
