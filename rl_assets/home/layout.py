"""The home directory: the one place that holds all of an installation's state.

``--home DIR``, else ``$RL_ASSETS_HOME``, else ``.rl-assets/`` in the working
directory. Inside: the embedded Postgres data (Dagster's instance and the
ledgers), the Dagster home, artifacts (trajectories, rewards, checkpoints),
sealed worlds, per-attempt forks, and the addresses of the background
services. Deleting the directory (after ``rl-assets stop``) removes everything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rl_assets.home.settings import HOME_ENV, RUNTIME_BASE_ENV, settings


class HomeError(Exception):
    """The home cannot be used as it is; said in one line, with what to do (the CLI exits 2)."""


def ensure_private_dir(path: Path) -> Path:
    """``path`` as a directory only this user can enter: created 0700, or refused.

    The temp folder is shared, so a directory there may have been made by
    someone else, in advance, to read or replace what we put in it. It is
    checked with ``lstat`` (a symlink is refused, not followed) and must be
    ours; once it is, nobody else can rename or remove it (sticky temp folder).
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise HomeError(f"{path} exists and is not a directory (a symlink or a file): refusing it; remove it")
    if st.st_uid != os.geteuid():
        raise HomeError(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): refusing it; remove it")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700, follow_symlinks=False)
    return path


def remove_private_dir(path: Path) -> None:
    """Remove a runtime directory if it is ours (never through a symlink, never another user's)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
        shutil.rmtree(path)


def _set_mode(path: Path, mode: int, wanted: int) -> None:
    if mode != wanted:
        os.chmod(path, wanted, follow_symlinks=False)


def _runtime_base() -> str:
    """The temp folder a home's runtime folder is under: the one :data:`RUNTIME_BASE_ENV` names, which a process
    whose own ``TMPDIR`` is inside the runtime folder inherits, else the system's."""
    return settings(only=(RUNTIME_BASE_ENV,)).runtime_base or tempfile.gettempdir()


@dataclass(frozen=True)
class Home:
    """Paths inside one home directory."""

    root: Path

    @classmethod
    def resolve(cls, home: str | os.PathLike[str] | None = None) -> Home:
        """The home from an explicit path, the environment, or the default."""
        chosen = home or settings(only=(HOME_ENV,)).home
        return cls(Path(chosen).expanduser().resolve())

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def worlds(self) -> Path:
        return self.root / "worlds"

    @property
    def rubrics(self) -> Path:
        """User rubrics, one ``<name>.json`` each, beside the built-in ones."""
        return self.root / "rubrics"

    @property
    def tasks(self) -> Path:
        """Recorded task snapshots, one read-only ``<world id>/`` copy of a task directory each."""
        return self.root / "tasks"

    @property
    def prices(self) -> Path:
        """Per-model prices of policy and judge tokens (optional; see :mod:`rl_assets.workloads.harbor.pricing`)."""
        return self.root / "prices.toml"

    @property
    def secrets(self) -> Path:
        """API keys the experiments name, one 0600 file each (:mod:`rl_assets.home.services.api_keys`)."""
        return self.root / "secrets"

    @property
    def launchpad_rules(self) -> Path:
        """What launchpad runs may start: task directories and hosts (:mod:`rl_assets.application.launchpad_rules`)."""
        return self.root / "launchpad.toml"

    @property
    def forks(self) -> Path:
        return self.root / "forks"

    @property
    def postgres_data(self) -> Path:
        return self.root / "postgres"

    @property
    def services(self) -> Path:
        """Small files recording the running services (ports, addresses, pids)."""
        return self.root / "services"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def runtime(self) -> Path:
        """A short, private (0700) path for the Ray head's unix sockets, which cap path length.

        Under the temp folder, or the one :data:`RUNTIME_BASE_ENV` names: the daemon and the UI run with
        ``TMPDIR`` inside this folder, and what they start must still find the same one.
        """
        tag = hashlib.sha256(str(self.root).encode()).hexdigest()[:10]
        return Path(_runtime_base()) / f"rla-{tag}"

    def private_tmp_env(self, name: str) -> dict[str, str]:
        """Environment for a service whose temp folder (``TMPDIR``) is a private one under the runtime folder.

        Dagster's code servers listen on unix sockets in the temp folder, so the daemon and the UI get their own.
        """
        return {RUNTIME_BASE_ENV: _runtime_base(), "TMPDIR": str(ensure_private_dir(self.runtime / name))}

    @property
    def layout(self) -> tuple[Path, ...]:
        """The directories every home has."""
        return (
            self.dagster_home,
            self.artifacts,
            self.worlds,
            self.forks,
            self.services,
            self.logs,
            self.rubrics,
            self.tasks,
            self.secrets,
        )

    def ensure(self, traverse_gid: int | None = None) -> Home:
        """The home's layout, private to its owner: the root and every directory of the layout 0700.

        ``traverse_gid``: the group of the embedded database's system user (when we are root, Postgres runs
        as that user), which may pass through the root (mode 0710: enter, never list) to its own data
        directory; so everything else directly in the root is made the owner's alone too. A group given once is
        kept by later calls without one; any other bit of a home made before this rule is taken away.
        """
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path in self.layout:
            path.mkdir(mode=0o700, exist_ok=True)
        mode = stat.S_IMODE(os.lstat(self.root).st_mode)
        traversable = traverse_gid is not None or mode & stat.S_IXGRP
        if traverse_gid is not None:
            os.chown(self.root, -1, traverse_gid, follow_symlinks=False)
        _set_mode(self.root, mode, 0o710 if traversable else 0o700)
        for entry in os.scandir(self.root):  # the layout, and whatever else was put there (rubrics/, tasks/, ...)
            st = entry.stat(follow_symlinks=False)
            if st.st_uid == os.geteuid() and (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                mode = stat.S_IMODE(st.st_mode)
                _set_mode(Path(entry.path), mode, 0o700 if stat.S_ISDIR(st.st_mode) else mode & 0o700)
        ensure_private_dir(self.runtime)
        return self
