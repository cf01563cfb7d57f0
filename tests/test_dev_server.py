"""``rl-assets dev``: its UI reached by its owner alone, and every process it started ended on SIGTERM and Ctrl-C.

The UI's token gate, in process: nothing without the token or its cookie reaches the app behind it; the login
URL sets a strict, HttpOnly cookie and drops the token from the address; the cookie is refused on a request
another site or origin made; a websocket upgrade needs it too; the token file is made once, 0600.

Then a real ``rl-assets dev`` on the session's home: nothing of its tree listens on TCP but the gate's port; a
GraphQL ``launchRun`` without the token is refused 401 and creates no run, while with it Dagster answers; the
login URL's cookie is what GraphQL then works with; a websocket upgrade without the cookie is refused; and
the local user ``nobody`` can neither read the token file nor get anything but 401 from the UI.

Last, a real Dagster webserver (and its code server) is started through the CLI, waited for until its UI
answers, and signalled; every process of its tree and of its session must then be gone within a bound, and
its port free. The home's Postgres, Ray head and daemon are the home's, not ``dev``'s: they stay.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect
from system_components import REQUIRE_ALL

from rl_assets.home.layout import Home, HomeError
from rl_assets.home.services.daemon import LocalDaemon
from rl_assets.home.services.dev_server import DevServer
from rl_assets.home.services.processes import free_loopback_port, port_is_open
from rl_assets.home.services.ui_auth import TokenGate, cookie_name, cookie_value, ensure_token, login_url, token_path

UI_DEADLINE_S = 300.0
STOP_BOUND_S = 45.0
TOKEN = "0123456789abcdef" * 4
PORT = 3000


# --- the gate, in process --------------------------------------------------------------------------------------


def _behind_the_gate() -> tuple[TestClient, list[str]]:
    """A client of an app behind the gate, and the paths the app saw (each request that got through)."""
    seen: list[str] = []

    async def page(request: Request) -> PlainTextResponse:
        seen.append(request.url.path)
        return PlainTextResponse("dagster")

    async def subscriptions(websocket: WebSocket) -> None:
        seen.append(websocket.url.path)
        await websocket.accept()
        await websocket.send_text("dagster")
        await websocket.close()

    app = Starlette(
        routes=[WebSocketRoute("/graphql", subscriptions), Route("/{path:path}", page, methods=["GET", "POST"])]
    )
    return TestClient(TokenGate(app, TOKEN, PORT), base_url=f"http://127.0.0.1:{PORT}"), seen


COOKIE = cookie_name(PORT)
LAUNCH = json.dumps({"query": "mutation { launchRun(executionParams: {}) { __typename } }"})


def test_the_gate_lets_nothing_through_without_the_token() -> None:
    client, seen = _behind_the_gate()
    wrong = "f" * len(TOKEN)
    refused = [
        client.get("/"),
        client.get("/server_info"),
        client.post("/graphql", content=LAUNCH),
        client.get("/", params={"token": wrong}),
        client.get("/", params={"token": ""}),
        client.post("/graphql", content=LAUNCH, headers={"authorization": f"Bearer {wrong}"}),
        client.post("/graphql", content=LAUNCH, headers={"cookie": f"{COOKIE}={cookie_value(wrong)}"}),
        client.post("/graphql", content=LAUNCH, headers={"cookie": f"{COOKIE}={TOKEN}"}),  # the token is not it
        client.post("/graphql", content=LAUNCH, headers={"cookie": f"{cookie_name(PORT + 1)}={cookie_value(TOKEN)}"}),
    ]
    assert [r.status_code for r in refused] == [401] * len(refused)
    assert seen == [], "a refused request reached the app"
    assert "Set-Cookie" not in refused[3].headers and TOKEN not in refused[0].text


def test_the_login_url_sets_a_strict_httponly_cookie_and_drops_the_token_from_the_address() -> None:
    client, seen = _behind_the_gate()
    login = urllib.parse.urlsplit(login_url("127.0.0.1", PORT, TOKEN))
    answer = client.get(f"/assets/trajectories?view=partitions&{login.query}", follow_redirects=False)
    assert answer.status_code == 303 and seen == []
    assert answer.headers["location"] == "/assets/trajectories?view=partitions"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={cookie_value(TOKEN)};") and TOKEN not in cookie
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= {part.strip() for part in cookie.split(";")}
    with_cookie = {"cookie": f"{COOKIE}={cookie_value(TOKEN)}"}
    assert client.post("/graphql", content=LAUNCH, headers=with_cookie).text == "dagster"
    # A script gives the token in a header: no redirect, no cookie.
    for scheme in ("Bearer", "token"):
        script = client.get("/server_info", headers={"authorization": f"{scheme} {TOKEN}"}, follow_redirects=False)
        assert script.status_code == 200 and "set-cookie" not in script.headers
    posted = client.post(f"/graphql?token={TOKEN}", content=LAUNCH)  # not a page to redirect: answered, cookie set
    assert posted.text == "dagster" and posted.headers["set-cookie"].startswith(f"{COOKIE}={cookie_value(TOKEN)};")
    assert seen == ["/graphql", "/server_info", "/server_info", "/graphql"]
    # Never a redirect off this server, whatever the path.
    assert client.get(f"//elsewhere.example/?token={TOKEN}", follow_redirects=False).headers["location"] == "/"


def test_the_cookie_is_refused_on_a_request_another_site_or_origin_makes() -> None:
    """A page of another port of the same host is the same *site*: SameSite=Strict lets the cookie go with it."""
    client, seen = _behind_the_gate()
    cookie = f"{COOKIE}={cookie_value(TOKEN)}"
    ours = {"cookie": cookie, "host": f"127.0.0.1:{PORT}"}
    theirs = [
        {**ours, "sec-fetch-site": "same-site", "origin": "http://127.0.0.1:8080"},
        {**ours, "sec-fetch-site": "cross-site"},
        {**ours, "origin": "http://127.0.0.1:8080"},
        {**ours, "origin": "null"},
    ]
    assert [client.post("/graphql", content=LAUNCH, headers=h).status_code for h in theirs] == [403] * len(theirs)
    assert seen == []
    own = {**ours, "sec-fetch-site": "same-origin", "origin": f"http://127.0.0.1:{PORT}"}
    assert client.post("/graphql", content=LAUNCH, headers=own).status_code == 200
    assert client.get("/", headers={**ours, "sec-fetch-site": "none"}).status_code == 200  # a bookmark
    assert seen == ["/graphql", "/"]


def test_a_websocket_upgrade_needs_the_cookie() -> None:
    client, seen = _behind_the_gate()
    url = f"ws://127.0.0.1:{PORT}/graphql"
    for headers in ({}, {"cookie": f"{COOKIE}={cookie_value('f' * 64)}"}):
        with pytest.raises(WebSocketDisconnect) as refused:
            with client.websocket_connect(url, headers=headers):
                pass
        assert refused.value.code == 1008
    assert seen == []
    own = {"cookie": f"{COOKIE}={cookie_value(TOKEN)}", "origin": f"http://127.0.0.1:{PORT}"}
    with client.websocket_connect(url, headers={**own, "host": f"127.0.0.1:{PORT}"}) as websocket:
        assert websocket.receive_text() == "dagster"
    with pytest.raises(WebSocketDisconnect):  # a page of another origin, with the owner's cookie
        with client.websocket_connect(url, headers={**own, "origin": "http://127.0.0.1:8080"}):
            pass
    assert seen == ["/graphql"]


def test_the_token_file_is_made_once_private_and_refused_if_others_may_read_it(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    token = ensure_token(home)
    path = token_path(home)
    assert path == home.services / "ui.token" and path.stat().st_mode & 0o777 == 0o600
    assert len(token) == 64 and ensure_token(home) == token, "made once: a bookmarked login URL keeps working"
    path.chmod(0o644)
    with pytest.raises(HomeError, match="0600"):
        ensure_token(home)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(HomeError):
        ensure_token(home)
    assert not (tmp_path / "elsewhere").exists(), "a token written through a planted link"


# --- a real rl-assets dev ----------------------------------------------------------------------------------------


def _request(port: int, method: str, path: str, body: str | None = None, **headers: str):
    """One request, no redirect followed: its status, headers (lower-case names) and body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, body=body, headers={"Content-Type": "application/json", **headers})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def _graphql(port: int, query: str, variables: dict | None = None, **headers: str) -> tuple[int, dict | bytes]:
    body = json.dumps({"query": query, "variables": variables or {}})
    status, _, answer = _request(port, "POST", "/graphql", body, **headers)
    return status, (json.loads(answer) if status == 200 else answer)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _answers(port: int, token: str) -> bool:
    try:
        return _request(port, "GET", "/server_info", **_bearer(token))[0] == 200
    except OSError:
        return False


WORKSPACE = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
    locationOrLoadError { ... on RepositoryLocation { repositories { name } } } } } } }"""
LAUNCH_RUN = """mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) { __typename }
}"""
RUNS_TAGGED = """query Runs($tag: String!) {
  runsOrError(filter: {tags: [{key: "rl-assets/test", value: $tag}]}) { ... on Runs { count } }
}"""


@dataclass
class RunningUI:
    port: int
    token: str
    location: str
    repository: str
    pid: int

    def launch_params(self, tag: str, config: dict) -> dict:
        return {
            "selector": {
                "repositoryLocationName": self.location,
                "repositoryName": self.repository,
                "jobName": "start_experiment_job",
            },
            "runConfigData": config,
            "executionMetadata": {"tags": [{"key": "rl-assets/test", "value": tag}]},
        }


def _start_dev(home: Path, port: int, stderr) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rl_assets.cli", "dev", "--home", str(home), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def _stop_dev(home: Path, dev: subprocess.Popen) -> None:
    if dev.poll() is None:
        dev.send_signal(signal.SIGTERM)
        try:
            dev.wait(timeout=STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            dev.kill()
            dev.wait()
    DevServer(Home(home)).stop()


class TestOnlyTheOwnerReachesTheUI:
    """One ``rl-assets dev`` for the class (its code location loaded), ended before the signal tests start theirs."""

    @pytest.fixture(scope="class")
    def ui(self, home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningUI]:
        port = free_loopback_port()
        log = tmp_path_factory.mktemp("dev") / "dev.log"
        with log.open("w") as out:
            dev = _start_dev(home, port, out)
        try:
            token = ensure_token(Home(home))  # dev's own: made once, whoever comes first
            deadline = time.monotonic() + UI_DEADLINE_S
            while True:
                assert dev.poll() is None, f"rl-assets dev exited {dev.returncode}: {log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"no loaded code location within {UI_DEADLINE_S:.0f} s"
                try:
                    status, answer = _graphql(port, WORKSPACE, **_bearer(token))
                except OSError:
                    status = 0
                if status == 200:
                    loaded = [
                        e for e in answer["data"]["workspaceOrError"]["locationEntries"] if e["loadStatus"] == "LOADED"
                    ]
                    if loaded:
                        break
                time.sleep(0.5)
            (entry,) = loaded
            (repository,) = entry["locationOrLoadError"]["repositories"]
            assert login_url("127.0.0.1", port, token) in log.read_text(), "the login URL is printed"
            yield RunningUI(port, token, entry["name"], repository["name"], dev.pid)
        finally:
            _stop_dev(home, dev)

    def test_nothing_of_dev_listens_on_tcp_but_the_gate(self, home: Path, ui: RunningUI) -> None:
        session = DevServer(Home(home)).session()
        assert session is not None
        listening = {
            (c.laddr.ip, c.laddr.port)
            for p in session.members()
            for c in p.net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        }
        assert listening == {("127.0.0.1", ui.port)}, f"Dagster reachable around the gate: {listening}"

    def test_a_launch_run_without_the_token_is_refused_and_creates_no_run(self, ui: RunningUI) -> None:
        tag = uuid.uuid4().hex
        launch = {"params": ui.launch_params(tag, {"ops": {"start_experiment": {"config": {"name": f"x{tag[:8]}"}}}})}
        wrong = "0" * len(ui.token)
        for headers in ({}, _bearer(wrong), {"Cookie": f"{cookie_name(ui.port)}={cookie_value(wrong)}"}):
            status, answer = _graphql(ui.port, LAUNCH_RUN, launch, **headers)
            assert status == 401, (headers, answer)
        status, _, _ = _request(ui.port, "POST", f"/graphql?token={wrong}", json.dumps({"query": LAUNCH_RUN}))
        assert status == 401
        status, answer = _graphql(ui.port, RUNS_TAGGED, {"tag": tag}, **_bearer(ui.token))
        assert status == 200 and answer["data"]["runsOrError"]["count"] == 0
        # With the token the same mutation reaches Dagster (here with a config it refuses, so no run either).
        invalid = {"params": ui.launch_params(tag, {})}
        status, answer = _graphql(ui.port, LAUNCH_RUN, invalid, **_bearer(ui.token))
        assert status == 200 and answer["data"]["launchRun"]["__typename"] == "RunConfigValidationInvalid", answer

    def test_the_login_url_sets_the_cookie_graphql_then_works_with(self, ui: RunningUI) -> None:
        login = urllib.parse.urlsplit(login_url("127.0.0.1", ui.port, ui.token))
        status, headers, _ = _request(ui.port, "GET", f"/?{login.query}")
        assert status == 303 and headers["location"] == "/", headers
        cookie = headers["set-cookie"].split(";")[0]
        assert cookie.startswith(f"{cookie_name(ui.port)}=") and ui.token not in cookie
        status, answer = _graphql(ui.port, "{ version }", Cookie=cookie, Origin=f"http://127.0.0.1:{ui.port}")
        assert status == 200 and answer["data"]["version"], answer
        status, _, page = _request(ui.port, "GET", "/asset-groups", Cookie=cookie)
        assert status == 200 and b"<html" in page.lower()

    def test_a_websocket_upgrade_without_the_cookie_is_refused(self, ui: RunningUI) -> None:
        def upgrade(**headers: str) -> bytes:
            lines = [
                "GET /graphql HTTP/1.1",
                f"Host: 127.0.0.1:{ui.port}",
                "Upgrade: websocket",
                "Connection: Upgrade",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                "Sec-WebSocket-Version: 13",
                "Sec-WebSocket-Protocol: graphql-ws",
                f"Origin: http://127.0.0.1:{ui.port}",
                *(f"{k}: {v}" for k, v in headers.items()),
            ]
            with socket.create_connection(("127.0.0.1", ui.port), timeout=60) as conn:
                conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
                return conn.recv(4096).split(b"\r\n", 1)[0]

        assert upgrade().startswith(b"HTTP/1.1 403")
        assert upgrade(Cookie=f"{cookie_name(ui.port)}={cookie_value('0' * 64)}").startswith(b"HTTP/1.1 403")
        assert upgrade(Cookie=f"{cookie_name(ui.port)}={cookie_value(ui.token)}").startswith(b"HTTP/1.1 101")

    def test_another_local_user_cannot_read_the_token_nor_reach_the_ui(self, home: Path, ui: RunningUI) -> None:
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            message = "acting as the user nobody needs root and setpriv (util-linux)"
            if os.environ.get(REQUIRE_ALL, "") not in ("", "0"):
                pytest.fail(message)
            pytest.skip(message)
        tag = uuid.uuid4().hex
        launch = {"params": ui.launch_params(tag, {"ops": {"start_experiment": {"config": {"name": f"x{tag[:8]}"}}}})}
        as_nobody = subprocess.run(
            ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "--", "/usr/bin/python3", "-I"]
            + [
                "-c",
                NOBODY,
                str(token_path(Home(home))),
                str(ui.port),
                json.dumps({"query": LAUNCH_RUN, "variables": launch}),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
        )
        assert as_nobody.returncode == 0, as_nobody.stderr
        seen = json.loads(as_nobody.stdout)
        assert seen["uid"] == 65534
        assert seen["token file"] == "PermissionError", seen
        assert seen["requests"] == {"page": 401, "server_info": 401, "launchRun": 401, "guessed token": 401}, seen
        status, answer = _graphql(ui.port, RUNS_TAGGED, {"tag": tag}, **_bearer(ui.token))
        assert status == 200 and answer["data"]["runsOrError"]["count"] == 0


NOBODY = """
import json, os, sys, urllib.error, urllib.request
token_file, port, launch = sys.argv[1:]  # launch: a GraphQL launchRun request's body
seen = {"uid": os.getuid(), "requests": {}}
try:
    open(token_file).read()
    seen["token file"] = "read"
except OSError as err:
    seen["token file"] = type(err).__name__
base = f"http://127.0.0.1:{port}"
for name, request in {
    "page": urllib.request.Request(base + "/"),
    "server_info": urllib.request.Request(base + "/server_info"),
    "launchRun": urllib.request.Request(base + "/graphql", launch.encode(), {"Content-Type": "application/json"}),
    "guessed token": urllib.request.Request(base + "/?token=" + "0" * 64),
}.items():
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            seen["requests"][name] = response.status
    except urllib.error.HTTPError as err:
        seen["requests"][name] = err.code
print(json.dumps(seen))
"""


# --- ending what it started --------------------------------------------------------------------------------------


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _unix_sockets(procs) -> set[str]:
    """Filesystem paths of the listening unix sockets of ``procs`` (abstract ones have no path)."""
    found = set()
    for proc in procs:
        try:
            found |= {c.laddr for c in proc.net_connections("unix") if c.laddr and not c.laddr.startswith("\0")}
        except psutil.Error:
            continue
    return {p for p in found if p.startswith("/")}


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_dev_ends_everything_it_started(home: Path, stop_signal: signal.Signals) -> None:
    port = free_loopback_port()
    LocalDaemon(Home(home)).ensure_running()  # the home's, started before dev: not one of dev's processes
    dev = subprocess.Popen(
        [sys.executable, "-m", "rl_assets.cli", "dev", "--home", str(home), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        token = ensure_token(Home(home))  # the one dev uses: made once, whoever comes first
        deadline = time.monotonic() + UI_DEADLINE_S
        while not _answers(port, token):
            assert dev.poll() is None, f"rl-assets dev exited {dev.returncode}: {dev.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, f"the UI did not answer within {UI_DEADLINE_S:.0f} s"
            time.sleep(0.5)
        session = DevServer(Home(home)).session()
        assert session is not None
        started = {p.pid: p for p in psutil.Process(dev.pid).children(recursive=True)}
        started.update((p.pid, p) for p in session.members())
        names = " ".join(" ".join(p.cmdline()) for p in started.values() if _alive(p))
        assert "dagster" in names and ("code-server" in names or "grpc" in names), names

        for path in _unix_sockets(started.values()):
            st = os.stat(Path(path).parent)
            assert st.st_uid == os.geteuid() and st.st_mode & 0o077 == 0, f"socket {path} is in a shared directory"

        os.kill(dev.pid, stop_signal)
        dev.wait(timeout=STOP_BOUND_S)
        left_deadline = time.monotonic() + 5
        while (left := [pid for pid, p in started.items() if _alive(p)]) and time.monotonic() < left_deadline:
            time.sleep(0.1)
        assert not left, f"left after {stop_signal.name}: {[(pid, started[pid].cmdline()[:3]) for pid in left]}"
        assert not session.members()
        assert not port_is_open(port)
        assert dev.returncode == 0, dev.stderr.read()[-3000:]
        gcs_port = int(os.environ["RL_ASSETS_RAY_ADDRESS"].rsplit(":", 1)[1])
        for name, service_port in (("Postgres", int(os.environ["DAGSTER_PG_PORT"])), ("Ray head", gcs_port)):
            assert port_is_open(service_port), f"the home's {name} belongs to the home: dev must leave it running"
        assert LocalDaemon(Home(home)).process() is not None, "dev starts the home's daemon and leaves it running"
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
        DevServer(Home(home)).stop()
