"""The environment variables are one pydantic-settings model, and the only place the package reads its own.

Each variable a module used to read itself (the home, the runtime folder, the container runtime, the Ray
address, a pod's own name and uid) is now a field of :class:`rl_assets.home.settings.Settings`: a bad value is one
line naming the variable and the value, wherever it is read. A source scan keeps it that way.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import rl_assets
from rl_assets.home import settings as settings_module
from rl_assets.home.layout import Home, ensure_private_dir
from rl_assets.home.settings import (
    ENV_VAR,
    HOME_ENV,
    POD_NAME_ENV,
    POD_UID_ENV,
    RAY_ADDRESS_ENV,
    RUNTIME_BASE_ENV,
    RUNTIME_ENV,
    VARIABLES,
    BadEnvironmentError,
    Settings,
    settings,
)

PACKAGE = Path(rl_assets.__file__).parent
UID = "0b7c6a4e-1111-2222-3333-444455556666"

BAD = [
    (RUNTIME_BASE_ENV, "tmp/rla", "must be an absolute path"),
    (RUNTIME_ENV, "nerdctl", "must be 'podman', 'docker' or an absolute path to either"),
    (RAY_ADDRESS_ENV, "auto", "must be HOST:PORT or ray://HOST:PORT"),
    (RAY_ADDRESS_ENV, "ray://head", "must be HOST:PORT or ray://HOST:PORT"),
    (POD_NAME_ENV, "Step_Pod", "must be a Kubernetes object name"),
    (POD_UID_ENV, "uid-1", "must be a Kubernetes uid"),
]


@pytest.mark.parametrize("variable, value, problem", BAD, ids=[f"{v}={x}" for v, x, _ in BAD])
def test_a_bad_value_of_a_moved_variable_is_one_line_naming_it_and_the_value(variable, value, problem):
    with pytest.raises(BadEnvironmentError) as refused:
        settings({variable: value})
    message = str(refused.value)
    assert message.startswith(f"{variable} {problem}") and message.endswith(f"(got {value!r})"), message
    assert "\n" not in message


GOOD = [
    (HOME_ENV, "/srv/rl-home", "home"),
    (HOME_ENV, "relative/home", "home"),
    (RUNTIME_BASE_ENV, "/run/user/1000", "runtime_base"),
    (RUNTIME_ENV, "podman", "container_runtime"),
    (RUNTIME_ENV, "/usr/local/bin/docker", "container_runtime"),
    (RAY_ADDRESS_ENV, "127.0.0.1:6379", "ray_address"),
    (RAY_ADDRESS_ENV, "ray://rl-assets-trainer-head-svc.rl-assets.svc.cluster.local:10001", "ray_address"),
    (POD_NAME_ENV, "dagster-run-0123abcd-x7k2p", "pod_name"),
    (POD_UID_ENV, UID, "pod_uid"),
]


@pytest.mark.parametrize("variable, value, field", GOOD, ids=[f"{v}={x}" for v, x, _ in GOOD])
def test_what_deployments_set_is_accepted(variable, value, field):
    assert getattr(settings({variable: value}), field) == value


@pytest.mark.parametrize("variable", [HOME_ENV, RUNTIME_BASE_ENV, RUNTIME_ENV, RAY_ADDRESS_ENV, POD_NAME_ENV])
def test_an_empty_moved_variable_is_its_default_as_before(variable):
    """``os.environ.get(NAME) or default`` treated ``NAME=`` as unset: the model keeps that."""
    assert settings({variable: ""}) == settings({})


def test_the_mapping_given_is_read_not_the_process_environment(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "kubernetes")
    assert settings({}).env == "local" and settings().env == "kubernetes"
    assert settings({"rl_assets_env": "kubernetes"}).env == "local", "names are exact, as the variables are"


def test_only_reads_just_the_variables_named(monkeypatch):
    """Finding the home works whatever another variable says: ``stop`` and ``doctor`` read no more than they use."""
    environ = {ENV_VAR: "cloud", HOME_ENV: "/srv/rl-home"}
    assert settings(environ, only=(HOME_ENV,)).home == "/srv/rl-home"
    with pytest.raises(BadEnvironmentError, match=ENV_VAR):
        settings(environ)
    monkeypatch.setenv(ENV_VAR, "cloud")
    monkeypatch.setenv(HOME_ENV, "/srv/rl-home")
    assert Home.resolve() == Home(Path("/srv/rl-home"))


def test_the_home_and_its_runtime_folder_come_from_the_settings(monkeypatch, tmp_path):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "h"))
    assert Home.resolve().root == tmp_path / "h"
    assert Home.resolve(tmp_path / "flag").root == tmp_path / "flag", "--home wins over the variable"
    monkeypatch.setenv(HOME_ENV, "")
    assert Home.resolve().root == Path(".rl-assets").resolve()
    home = Home(tmp_path / "h")
    monkeypatch.delenv(RUNTIME_BASE_ENV, raising=False)
    assert home.runtime.parent == Path(tempfile.gettempdir())
    monkeypatch.setenv(RUNTIME_BASE_ENV, str(tmp_path))
    assert home.runtime.parent == tmp_path
    ensure_private_dir(home.runtime)
    assert home.private_tmp_env("daemon")[RUNTIME_BASE_ENV] == str(tmp_path), "what the service passes on"
    monkeypatch.setenv(RUNTIME_BASE_ENV, "tmp")
    with pytest.raises(BadEnvironmentError, match=f"^{RUNTIME_BASE_ENV} must be an absolute path"):
        _ = home.runtime


def test_the_container_runtime_and_the_pod_identity_come_from_the_settings(monkeypatch):
    from rl_assets.containers.runtime import _candidates
    from rl_assets.kubernetes.task_pods import PodOwner

    monkeypatch.setenv(RUNTIME_ENV, "nerdctl")
    with pytest.raises(BadEnvironmentError, match=f"^{RUNTIME_ENV} must be"):
        _candidates()
    monkeypatch.delenv(RUNTIME_ENV)
    monkeypatch.setenv(POD_NAME_ENV, "step-pod")
    monkeypatch.setenv(POD_UID_ENV, "uid-1")
    with pytest.raises(BadEnvironmentError, match=f"^{POD_UID_ENV} must be a Kubernetes uid"):
        PodOwner.from_env()
    monkeypatch.setenv(POD_UID_ENV, UID)
    assert PodOwner.from_env() == PodOwner("step-pod", UID)


def test_a_command_that_skips_the_upfront_check_still_refuses_a_bad_variable_in_one_line(tmp_path):
    """``stop`` works whatever ``RL_ASSETS_ENV`` says, but the runtime folder it cleans is the variable's."""
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", "stop", "--home", str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, RUNTIME_BASE_ENV: "tmp"},
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [f"rl-assets: {RUNTIME_BASE_ENV} must be an absolute path (got 'tmp')"]


def test_the_settings_load_without_dagster():
    """The CLI validates the environment before Dagster loads, so a refusal is quick."""
    probe = (
        "import sys, rl_assets.home.settings, rl_assets.home.layout\n"
        "print(' '.join({m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True).stdout
    loaded = set(out.split())
    assert "pydantic_settings" in loaded and not loaded & {"dagster", "ray"}


def test_every_variable_is_a_field_with_a_description():
    assert VARIABLES == tuple(f.alias for f in Settings.model_fields.values())
    assert all(v.startswith("RL_ASSETS_") for v in VARIABLES) and len(set(VARIABLES)) == len(VARIABLES)
    assert all(f.description for f in Settings.model_fields.values())


# ---------------------------------------------------------------- nothing else reads them


def _constants() -> dict[str, str]:
    """Every module-level string constant of the package, by name: what an ``os.environ.get(NAME_ENV)`` names."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if isinstance(node.value.value, str):
                    found.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return found


def _is_environ(node: ast.AST) -> bool:
    """``os.environ``, or ``environ`` imported from ``os``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id == "environ"


def _read_names(tree: ast.AST) -> list[ast.expr]:
    """The name arguments of ``os.environ[...]`` (read), ``os.environ.get/pop/setdefault(...)`` and ``os.getenv``."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            names.append(node.slice)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute | ast.Name):
            func = node.func
            getenv = (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                isinstance(func, ast.Name) and func.id == "getenv"
            )
            method = isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault")
            if getenv or (method and _is_environ(func.value)):
                names.append(node.args[0])
    return names


def _ours(name: ast.expr, constants: dict[str, str]) -> str | None:
    """The variable a read names, if it is one of the package's own (a literal or a constant); else None."""
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        value = name.value
    elif isinstance(name, ast.Name | ast.Attribute):
        value = constants.get(name.id if isinstance(name, ast.Name) else name.attr, "")
    else:
        return None  # a variable the caller names (an endpoint's key variable, a --from-env argument)
    return value if value.startswith(("RL_ASSETS_", "POD_")) else None


def _own_reads(source: str, constants: dict[str, str]) -> set[str]:
    return {v for n in _read_names(ast.parse(source)) if (v := _ours(n, constants)) is not None}


def test_the_scan_finds_a_direct_read():
    constants = {"HOME_ENV": "RL_ASSETS_HOME", "POD_ENV": "POD_NAME"}
    source = """
import os
from os import environ, getenv
a = os.environ.get(HOME_ENV)
b = os.environ["RL_ASSETS_ENV"]
c = os.getenv(pod_specs.POD_ENV)
d = environ.get("RL_ASSETS_BWRAP")
e = getenv("RL_ASSETS_IMAGE", "x")
os.environ["RL_ASSETS_RAY_ADDRESS"] = "written, not read"
f = os.environ.get("LD_LIBRARY_PATH") or os.environ.get(endpoint.api_key_env) or os.environ.get(variable)
g = '''os.environ.get("RL_ASSETS_NOT_DUMPABLE")'''  # source text another process runs, not a read of ours
"""
    assert _own_reads(source, constants) == {
        "RL_ASSETS_HOME",
        "RL_ASSETS_ENV",
        "POD_NAME",
        "RL_ASSETS_BWRAP",
        "RL_ASSETS_IMAGE",
    }


def test_no_module_reads_a_variable_of_ours_but_the_settings():
    constants = _constants()
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(settings_module.__file__):
            continue
        reads = _own_reads(path.read_text(encoding="utf-8"), constants)
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if reads:
            found[relative] = sorted(reads)
    assert not found, f"read these through rl_assets.home.settings.Settings instead: {found}"
