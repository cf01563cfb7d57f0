"""What a launchpad run may start: task sets the owner allowed, model servers on hosts the owner allowed.

A ``train`` on the command line reads the task set as the user who typed it,
and calls the servers that user named. A launchpad run executes as the home's
owner, with the owner's files and keys, whoever filled in its form (a shared
browser, a stolen login link). So the launchpad is held to the owner's own
list, in ``<home>/launchpad.toml`` (the owner's file, read at every launch):

.. code-block:: toml

    task_dirs = ["/srv/tasks"]            # a task set must lie under one of these (after resolving links)
    hosts = ["127.0.0.1", "vllm.lan:8000"]  # --policy-url and --judge-url hosts (host, or host:port)

Without the file, no task set is allowed and only loopback hosts are.
"""

from __future__ import annotations

import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from rl_assets.domain.experiment import ExperimentConfig

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class LaunchRefused(ValueError):
    """A launchpad config the owner's rules do not allow; the message names the rule and the file."""


@dataclass(frozen=True)
class LaunchpadRules:
    """The owner's allowances for launchpad runs."""

    path: Path
    task_dirs: tuple[str, ...] = ()
    hosts: tuple[str, ...] = LOOPBACK_HOSTS

    @classmethod
    def load(cls, path: Path) -> LaunchpadRules:
        """The rules in ``path`` (the defaults if it does not exist); refused if it is a link or not the owner's."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return cls(path)
        except OSError as err:
            raise LaunchRefused(f"{path}: cannot read the launchpad's rules ({err.strerror})") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
                raise LaunchRefused(f"{path} must be a regular file of the home's owner, writable by nobody else")
            try:
                data = tomllib.load(f)
            except tomllib.TOMLDecodeError as err:
                raise LaunchRefused(f"{path}: {err}") from None
        unknown = sorted(set(data) - {"task_dirs", "hosts"})
        dirs, hosts = data.get("task_dirs", []), data.get("hosts", list(LOOPBACK_HOSTS))
        if unknown or not _strings(dirs) or not _strings(hosts) or not all(os.path.isabs(d) for d in dirs):
            raise LaunchRefused(
                f"{path}: expected task_dirs (absolute paths) and hosts (names), lists of strings"
                + (f"; unknown keys: {', '.join(unknown)}" if unknown else "")
            )
        return cls(path, tuple(os.path.realpath(d) for d in dirs), tuple(h.lower() for h in hosts))

    def check(self, config: ExperimentConfig) -> None:
        """Refuse a task set outside ``task_dirs`` and a model server outside ``hosts``."""
        if config.tasks is not None:
            where = os.path.realpath(config.tasks)
            if not any(os.path.commonpath([where, d]) == d for d in self.task_dirs):
                allowed = ", ".join(self.task_dirs) or "none yet"
                raise LaunchRefused(
                    f"tasks: {config.tasks} is not under a directory the owner allows the launchpad (allowed: "
                    f"{allowed}); add it to task_dirs in {self.path}, or start it with `rl-assets train`"
                )
        for field in ("policy_url", "judge_url"):
            url = getattr(config, field)
            if url is None:
                continue
            parts = urlsplit(url)
            host = (parts.hostname or "").lower()
            if host not in self.hosts and f"{host}:{parts.port}" not in self.hosts:
                raise LaunchRefused(
                    f"{field}: host {host or '?'} is not one the owner allows the launchpad "
                    f"({', '.join(self.hosts)}); add it to hosts in {self.path}"
                )


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)
