"""The home is its owner's alone (issue 26, row 20): another local user reads nothing of it, and the
embedded database's system user reaches only its own data directory.

Run against the session's home after the tests before it have trained, judged and exported in it, as the
user ``nobody`` and as the database's user, through the real file system (a separate process per user).
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest

from rl_assets.home.services.postgres import ROOT_RUNS_AS

PROBE = r"""
import json, os, sys
readable = []
for path in json.load(sys.stdin):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as f:
                f.read(1)
        readable.append(path)
    except OSError:
        pass
print(json.dumps(readable))
"""


SYSTEM_PYTHON = "/usr/bin/python3"
"""The probe's interpreter: one any user may run (the venv's may sit under root's 0700 directories)."""


def _readable_as(user: str, paths: list[str]) -> list[str]:
    """The paths ``user`` can list (directories) or read (anything else), tried by a process of that user."""
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-c", PROBE],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        user=user,
        group=pwd.getpwnam(user).pw_gid,
        extra_groups=[],
        cwd="/",
        check=True,
    )
    return json.loads(proc.stdout)


def _everything(home: Path) -> list[str]:
    found = [str(home)]
    for top, dirs, files in os.walk(home):
        found += [os.path.join(top, name) for name in dirs + files]
    return found


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other users")


def test_another_user_reads_nothing_of_the_home(home: Path):
    paths = _everything(home)
    for held in ("services/postgres-app.password", "dagster/dagster.yaml", "logs/postgres.log", "postgres/PG_VERSION"):
        assert str(home / held) in paths, held
    assert _readable_as("nobody", paths) == []


def test_the_database_user_reaches_only_its_data(home: Path):
    paths = _everything(home)
    data = str(home / "postgres")
    readable = _readable_as(ROOT_RUNS_AS, paths)
    assert readable, "the database's own files are readable to it"
    outside = [p for p in readable if p != data and not p.startswith(data + os.sep)]
    assert outside == []


def test_the_home_and_its_files_are_private(home: Path):
    db_group = pwd.getpwnam(ROOT_RUNS_AS).pw_gid
    st = os.stat(home)
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o710, db_group)  # the database's user enters, never lists
    for name in ("dagster", "artifacts", "worlds", "forks", "services", "logs"):
        assert stat.S_IMODE(os.stat(home / name).st_mode) == 0o700, name
    for secret in (home / "services").iterdir():
        if secret.suffix in (".token", ".password"):
            assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600, secret
