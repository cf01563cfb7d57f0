"""Shared fixtures: one real home (embedded Postgres, Ray head) for the session."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rl_assets.home.layout import Home
from rl_assets.home.services.local_deployment import LocalDeployment
from rl_assets.stores.database import Database
from rl_assets.stores.home_stores import Stores

# Read by Ray when it is imported (before the home fixture exports its environment): the home's head is
# a single-node loopback cluster with token auth, and a driver in this process must not rewrite 127.0.0.1 to
# the machine's address nor connect without the token (whose path the fixture exports before any ray.init).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_AUTH_MODE"] = "token"


@pytest.fixture(scope="session")
def home() -> Iterator[Path]:
    # Not under pytest's 0700 tmp root: the embedded Postgres runs as its own user when we are root.
    root = Path(tempfile.mkdtemp(prefix="rl-assets-test-", dir="/tmp"))
    root.chmod(0o755)
    deployment = LocalDeployment(Home(root / "home"))
    try:
        deployment.up()
    except BaseException:  # a half-started home (e.g. Ray failed to start) must not outlive the session
        deployment.down()
        shutil.rmtree(root, ignore_errors=True)
        raise
    yield root / "home"
    sessions = {name: s for name, s in deployment.sessions().items() if s is not None}
    try:
        deployment.down()
        left = {name: [p.pid for p in s.members()] for name, s in sessions.items() if s.members()}
        assert not left, f"processes of the test home left after stop (by session): {left}"
        assert not deployment.home.runtime.exists(), f"runtime dir {deployment.home.runtime} left after stop"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def stores(home: Path) -> Iterator[Stores]:
    s = Stores(home, Database.from_env())
    yield s
    s.db.close()


@pytest.fixture
def instance(home: Path):
    from dagster import DagsterInstance

    assert os.environ["DAGSTER_HOME"] == str(home / "dagster")
    with DagsterInstance.get() as inst:
        yield inst


E2E_FIXTURES = frozenset({"home", "fresh_home", "initialised_postgres"})
"""Fixtures that start a home or a Postgres: ``home`` (and ``stores``, ``instance`` on it) is the session's,
``fresh_home`` (test_local_services) a home of a test's own, ``initialised_postgres`` (test_k8s_security) a bare
Postgres running the chart's init script."""
E2E_MODULES = {
    "test_real_cluster.py": "runs against a deployed cluster (skipped without KUBECONFIG)",
}
"""Modules that need a running deployment without any of those fixtures (e.g. started through the CLI)."""
MACHINE_WIDE_MODULES = frozenset({"test_container_tasks.py", "test_harbor_cookbook.py"})
"""Modules whose tests start task containers and count every rl-assets container on the machine: under
``pytest -n`` (each worker a home of its own) they run on one worker, one after another (see below)."""


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``pytest -n N --dist loadfile``: a module's tests on one worker (and its module fixtures set up once), and
    the :data:`MACHINE_WIDE_MODULES` on one worker together, one after another.

    pytest-xdist's own grouping mark (``--dist loadfile``) rewrites a node id attribute that pytest 9 no longer
    reads, so it silently degrades to per-test distribution; its scheduler hook is the documented way to group.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModulesScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "machine-wide" if Path(module).name in MACHINE_WIDE_MODULES else module

    return ModulesScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark as ``e2e`` every test that needs a running home (``-m "not e2e"`` is the fast tier), and run the
    browser test first (a stable sort keeps every other order).

    A test is e2e when its fixture closure holds one of :data:`E2E_FIXTURES`, or its module is one of
    :data:`E2E_MODULES`. The UI's partition grid renders the first few dozen step keys of the session's home;
    the experiment the browser test looks for must be among them, so it is trained before the rest of the suite's.
    """
    for item in items:
        if E2E_FIXTURES.intersection(getattr(item, "fixturenames", ())) or item.path.name in E2E_MODULES:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: not item.nodeid.startswith("tests/test_ui_browser.py"))


_exit_status: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the test process once its report is written, with pytest's exit status, skipping the interpreter's
    teardown.

    The session's home is down by then (its fixture's teardown ran). What is left is the interpreter tearing
    down the native libraries this process loaded (Ray's and gRPC's threads, torch): once in CI every test
    passed and the process then died of a segmentation fault at exit, which turned the run red after the fact.
    """
    if _exit_status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[0])
