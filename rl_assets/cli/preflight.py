"""What a command needs of this machine, checked before it records anything: ``rl-assets doctor`` shows them all.

A missing sandbox tool, a home the database cannot reach or a full disk would otherwise surface minutes later,
deep in a daemon's log, as runs that never start. Each check is quick (a ``true`` in a sandbox, a stat, a
bind) and says, when it fails, what to do about it; ``train``, ``tasks check`` and ``dev`` refuse on the
first failure, on one line.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rl_assets.home.layout import Home, HomeError
from rl_assets.home.services.postgres import EmbeddedPostgres
from rl_assets.sandbox import seccomp
from rl_assets.sandbox.bubblewrap import INSTALL, SandboxUnavailable
from rl_assets.sandbox.launcher import isolation

MIN_FREE_BYTES = 1 << 30
"""Free disk a home needs to start: Postgres's data directory, Ray's session files, the first worlds and forks."""
LOW_FREE_BYTES = 5 << 30
"""Below this a long experiment's run logs and checkpoints may fill the disk: a warning."""

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def line(self) -> str:
        """The one line a refusal prints."""
        return f"{self.name}: {self.detail}" + (f"; {self.fix}" if self.fix else "")


class PreflightError(RuntimeError):
    """A check failed: its one line names the problem and the fix."""


def check_sandbox(tasks: bool = False) -> Check:
    """The sandbox starts a process. Without user namespaces the reference rollouts run as plain processes (a
    warning), but a task's commands never run unsandboxed (with ``tasks``, a failure)."""
    try:
        iso = isolation()
    except SandboxUnavailable as err:
        return Check("sandbox", "fail", str(err).removesuffix(f": {INSTALL}"), INSTALL)
    if iso.name != "bwrap":
        return Check(
            "sandbox",
            "fail" if tasks else "warn",
            f"no sandbox: {iso.bwrap}; reference rollouts run as plain processes and task trials are refused",
            "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)",
        )
    return Check("sandbox", "ok", iso.bwrap)


def check_seccomp() -> Check:
    try:
        seccomp.filter_fd()
    except seccomp.SeccompUnavailable as err:
        problem, _, fix = str(err).partition(": ")
        return Check("seccomp", "fail", problem, fix)
    return Check("seccomp", "ok", "libseccomp compiles the rollout's filter")


def check_home(home: Home) -> Check:
    if home.root.exists() and not home.root.is_dir():
        return Check("home", "fail", f"{home.root} is not a directory", "choose another --home")
    for path in home.layout:
        if path.exists() and not path.is_dir():
            return Check(
                "home", "fail", f"{path} is not a directory", f"move it away; the home keeps its {path.name} there"
            )
    try:
        EmbeddedPostgres(home).check()
    except HomeError as err:
        return Check("home", "fail", str(err))
    return Check("home", "ok", f"{home.root} (reachable by the home's Postgres)")


def _existing(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def check_disk(home: Home) -> Check:
    where = _existing(home.root)
    free = shutil.disk_usage(where).free
    detail = f"{free / 2**30:.1f} GiB free on {where}"
    if free < MIN_FREE_BYTES:
        fix = f"free at least {MIN_FREE_BYTES >> 30} GiB or choose another --home"
        return Check("disk", "fail", f"only {detail}", fix)
    if free < LOW_FREE_BYTES:
        return Check("disk", "warn", detail, "a long experiment's checkpoints and run logs may fill it")
    return Check("disk", "ok", detail)


def check_port(host: str, port: int) -> Check:
    """A port to listen on (``0``: any free loopback port, as the home's Postgres and Ray head take)."""
    name = "loopback ports" if port == 0 else f"port {host}:{port}"
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as err:
            return Check(name, "fail", f"cannot listen: {err.strerror}", "choose another --port or stop what holds it")
    return Check(name, "ok", f"can listen on {host}" if port == 0 else "free")


def check_code_location() -> Check:
    """The code location the daemon and every run worker load, loaded here first: they share this environment,
    so what fails here would fail there, as sensor ticks and runs that never start."""
    try:
        from rl_assets.definitions import load_definitions

        defs = load_definitions()
    except Exception as err:  # whatever the code raises, the daemon would meet it too
        first = (str(err).strip().splitlines() or [""])[0]
        return Check(
            "code location",
            "fail",
            f"rl_assets.definitions does not load: {type(err).__name__}: {first}",
            "`dg check defs` shows the traceback",
        )
    jobs, sensors = len(list(defs.jobs or [])), len(list(defs.sensors or []))
    return Check("code location", "ok", f"rl_assets.definitions loads ({jobs} jobs, {sensors} sensors)")


def run_checks(checks: Iterable[Callable[[], Check]]) -> list[Check]:
    return [check() for check in checks]


Checks = list[Callable[[], Check]]


def for_home(home: Home, *, sandbox: bool = True, tasks: bool = False, code: bool = True) -> Checks:
    """What a command that starts the home's services needs; ``sandbox``: it runs trials (``tasks``: task
    trials); ``code``: it drives runs (the daemon loads the code location)."""
    checks: Checks = [lambda: check_home(home), lambda: check_disk(home), lambda: check_port("127.0.0.1", 0)]
    if sandbox:
        checks += [lambda: check_sandbox(tasks), check_seccomp]
    if code:
        checks.append(check_code_location)
    return checks


def require(checks: Iterable[Callable[[], Check]]) -> list[Check]:
    """Run ``checks``; raise :class:`PreflightError` with the first failure's line. Returns them (warnings too)."""
    done = run_checks(checks)
    for check in done:
        if check.status == "fail":
            raise PreflightError(check.line())
    return done


def table(checks: list[Check]) -> list[str]:
    """``rl-assets doctor``'s table: one row a check, its fix under it when it has one."""
    width = max(len(c.name) for c in checks)
    rows = [f"{'check':<{width}}  status  detail"]
    for c in checks:
        rows.append(f"{c.name:<{width}}  {c.status:<6}  {c.detail}")
        if c.fix and c.status != "ok":
            rows.append(f"{'':<{width}}          fix: {c.fix}")
    return rows
