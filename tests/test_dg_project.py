"""The repository is a ``dg`` project (``[tool.dg]``) whose code location loads lazily.

``dg check defs`` and ``dagster definitions validate`` are run as a person runs
them, from the repository root, against the test home's instance (Postgres).
Lazy loading is checked by its effect: importing ``rl_assets.definitions``
defines nothing, so it succeeds even when the environment the definitions read
is invalid, and only building them refuses it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TIMEOUT_S = 300


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def test_dg_check_defs_passes_from_the_repository_root(home: Path) -> None:
    result = _run([str(BIN / "dg"), "check", "defs"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "All definitions loaded successfully." in result.stdout, result.stdout[-3000:]


def test_dagster_definitions_validate_loads_the_module(home: Path) -> None:
    result = _run([sys.executable, "-m", "dagster", "definitions", "validate", "-m", "rl_assets.definitions"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr  # its log goes to either, depending on the instance's logging
    assert "All code locations passed validation." in output, output[-3000:]


PROBE = """
import rl_assets.definitions as d
print("imported", "defs" in vars(d))
try:
    d.defs
except Exception as e:
    print("building:", type(e).__name__, e)
"""


def test_importing_the_definitions_builds_nothing_until_they_are_loaded() -> None:
    env = {**os.environ, "RL_ASSETS_ENV": "bogus"}
    result = _run([sys.executable, "-W", "ignore", "-c", PROBE], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "imported False", "the import must neither fail on the environment nor hold built definitions"
    assert lines[1].startswith("building: BadEnvironmentError RL_ASSETS_ENV must be"), lines
