"""Harbor task directories are untrusted input: each test is an attack on ``task.toml`` or a task's files.

Issue 26's "Untrusted tasks" rows. A task set comes from whoever wrote it, and ``train`` and ``tasks check``
run as the home's owner (often root): a number in ``task.toml`` must not switch a limit off, and no file
of a task may be a way to make the trusted side read something the task's author could not. Every copy
of a task is made through directory descriptors with ``O_NOFOLLOW`` (a link is refused, never followed,
whenever it appears), and what is recorded is the copy, checked again. The races are made deterministic:
the swap is done at the point between the check and the copy (the last call of the check), not timed.
No home is needed; nothing here runs the sandbox.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from rl_assets.tasks.check import OracleRun, check_tasks
from rl_assets.tasks.config import TaskConfig
from rl_assets.tasks.problems import describe
from rl_assets.tasks.task import InvalidTaskError, load_task

SECRET = "root-only-secret-7f3a"
LINKS_REFUSED = "a symbolic link (a task is copied as plain files; links are refused)"


def make_task(root: Path, toml: str = 'schema_version = "1.4"\n', name: str = "t") -> Path:
    """A minimal valid task with a solution: plain-files environment, a verifier, ``toml`` as task.toml."""
    path = root / name
    for sub in ("tests", "environment/sub", "solution"):
        (path / sub).mkdir(parents=True)
    (path / "instruction.md").write_text("Do the thing.\n")
    (path / "task.toml").write_text(toml)
    (path / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (path / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    (path / "environment" / "x").write_text("the original bytes\n")
    (path / "environment" / "sub" / "y").write_text("nested\n")
    return path


@pytest.fixture
def secret_dir(tmp_path) -> Path:
    """A directory only its owner (root, when the suite runs as root) may read, holding a 0600 secret."""
    where = tmp_path / "root-only"
    where.mkdir()
    (where / "secret.txt").write_text(SECRET)
    (where / "secret.txt").chmod(0o600)
    (where / "test.sh").write_text(f"#!/bin/bash\necho {SECRET}\n")
    (where / "solve.sh").write_text(f"#!/bin/bash\necho {SECRET}\n")
    where.chmod(0o700)
    return where


def problems_of(path: Path) -> list[str]:
    with pytest.raises(InvalidTaskError) as err:
        load_task(path)
    return err.value.problems


def holds_secret(root: Path) -> list[Path]:
    """Every file under ``root`` (links not followed) whose bytes hold the secret."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            file = Path(dirpath, name)
            if not file.is_symlink() and SECRET.encode() in file.read_bytes():
                found.append(file)
    return found


# --- rows 13 and 14: every duration and size in task.toml is finite and bounded --------------------------

SECONDS = "must be a finite number of seconds greater than 0 and at most 86400"


@pytest.mark.parametrize("value, shown", [("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ("-5", "-5"), ("0", "0")])
def test_agent_timeout_nan_cannot_remove_the_agents_deadline(tmp_path, value, shown):
    """Row 13: ``min(nan, trial_timeout)`` is nan, so the agent had no deadline; now the task is refused."""
    path = make_task(tmp_path, f"[agent]\ntimeout_sec = {value}\n")
    assert problems_of(path) == [f"{path}/task.toml: [agent] timeout_sec: {SECONDS} (got {shown})"]


@pytest.mark.parametrize("value, shown", [("1e9", "1000000000.0"), ("nan", "nan"), ("-1.0", "-1.0")])
def test_verifier_timeout_of_a_billion_seconds_is_refused(tmp_path, value, shown):
    """Row 14 (task.toml's side): ``[verifier] timeout_sec = 1e9`` was accepted."""
    path = make_task(tmp_path, f"[verifier]\ntimeout_sec = {value}\n")
    assert problems_of(path) == [f"{path}/task.toml: [verifier] timeout_sec: {SECONDS} (got {shown})"]


@pytest.mark.parametrize(
    "toml, expected",
    [
        ("[environment]\nmemory_mb = 0\n", "[environment] memory_mb: must be a whole number of MB from 1 to 1048576"),
        ("[environment]\ncpus = 100000\n", "[environment] cpus: must be a whole number of CPUs from 1 to 1024"),
        ("[environment]\nbuild_timeout_sec = inf\n", f"[environment] build_timeout_sec: {SECONDS} (got inf)"),
        ("[environment]\nstorage_mb = -1\n", "[environment] storage_mb: must be a whole number of MB from 1 to"),
        ("[environment]\ngpus = 99999999999999999999\n", "[environment] gpus: must be a whole number of GPUs"),
        ("[environment]\nmemory = '99999999G'\n", "[environment]: memory: 99999999G is 102399998976 MB; memory_mb"),
        ("[environment]\nmemory = '" + "9" * 400 + "G'\n", "[environment]: memory: more than 1048576 MB; memory_mb"),
        ("[verifier]\ntimeout_sec = true\n", f"[verifier] timeout_sec: {SECONDS} (got True)"),
        ("[verifier.environment]\ncpus = nan\n", "[verifier.environment] cpus: must be a whole number of CPUs"),
        ("[environment.healthcheck]\ncommand = 'true'\nretries = -1\n", "[environment.healthcheck] retries:"),
    ],
)
def test_a_size_or_duration_smuggled_in_another_shape_is_refused_naming_it(tmp_path, toml, expected):
    path = make_task(tmp_path, toml)
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}/task.toml: {expected}"), problem


REQUIRED: dict[str, dict] = {
    "PackageInfo": {"name": "a/b"},
    "Author": {"name": "a"},
    "HealthcheckConfig": {"command": "true"},
    "TpuSpec": {"type": "v6e", "topology": "2x4"},
    "MCPServerConfig": {"name": "m", "url": "http://m/mcp"},
    "VerifierCollectConfig": {"command": "true"},
    "StepConfig": {"name": "s"},
    "ArtifactConfig": {"source": "/app/out"},
}
"""What each table of the schema needs to be valid, so that only the number under test is wrong."""


def _members(annotation: object, listed: bool = False) -> list[tuple[bool, object]]:
    """The types an annotation admits (each with whether it is a list's item), through unions and ``Annotated``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0], listed)
    if origin in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _members(a, listed)]
    if origin in (list, dict):
        return _members(typing.get_args(annotation)[-1], listed or origin is list)
    return [(listed, annotation)]


def _table(model: type[BaseModel], key: str) -> tuple[type[BaseModel], bool] | None:
    """The table type of ``model``'s ``key`` (and whether it is an array of tables), if it is one."""
    for listed, member in _members(model.model_fields[key].annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member, listed
    return None


def numeric_keys(model: type[BaseModel] = TaskConfig, prefix: tuple = ()) -> list[tuple]:
    """Every int or float key of ``task.toml``'s schema, as its path (an array of tables' first item: ``0``)."""
    keys = []
    for key, field in model.model_fields.items():
        if any(member in (int, float) for _, member in _members(field.annotation)):
            keys.append((*prefix, key))
        if table := _table(model, key):
            keys.extend(numeric_keys(table[0], (*prefix, key, *((0,) if table[1] else ()))))
    return keys


def _document(path: tuple, value: object) -> dict:
    """A parsed task.toml whose only possible problem is ``value`` at ``path`` (each table has what it needs)."""
    document: dict = {}
    node, model = document, TaskConfig
    for key in [p for p in path[:-1] if isinstance(p, str)]:
        model, listed = _table(model, key)
        table = dict(REQUIRED.get(model.__name__, {}))
        node[key] = [table] if listed else table
        node = table
    node[path[-1]] = value
    return document


NUMERIC_KEYS = numeric_keys()


def test_the_schema_walk_finds_every_number():
    """The walk below is what makes the next test cover every key: it finds the ones known to exist."""
    names = {".".join(str(p) for p in path) for path in NUMERIC_KEYS}
    for key in (
        "agent.timeout_sec",
        "verifier.timeout_sec",
        "environment.build_timeout_sec",
        "environment.cpus",
        "environment.memory_mb",
        "environment.storage_mb",
        "environment.gpus",
        "environment.healthcheck.retries",
        "verifier.environment.cpus",
        "verifier.continuous.poll_interval_sec",
        "verifier.collect.0.timeout_sec",
        "steps.0.agent.timeout_sec",
        "steps.0.min_reward",
    ):
        assert key in names, sorted(names)


@pytest.mark.parametrize("path", NUMERIC_KEYS, ids=lambda p: ".".join(str(x) for x in p))
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1, 10**12], ids=["nan", "inf", "-inf", "-1", "1e12"])
def test_every_number_in_task_toml_is_finite_and_bounded(path, bad):
    """No number of the schema takes nan, an infinity, a negative or an absurd value; the refusal names the key."""
    if path[-1] == "min_reward" and bad in (-1, 10**12):
        pytest.skip("a reward threshold is a reward, not a duration or size: only finiteness applies")
    document = _document(path, bad)
    TaskConfig.model_validate(_document(path, 1))  # the document is valid around the number under test
    with pytest.raises(ValidationError) as err:
        TaskConfig.model_validate(document)
    (line,) = describe("task.toml", document, err.value)
    assert f"{path[-1]}:" in line, line


# --- row 15: tasks check refuses linked environment/tests/solution, as train does ------------------------


def _recording_oracle(seen: list[Path]):
    """The oracle as ``run_oracle`` copies a task (``copytree(..., symlinks=True)``), recording what it read."""

    def oracle(task) -> OracleRun:
        seen.append(task.path)
        copy = task.path.parent / f".oracle-copy-{len(seen)}"
        for part in ("environment", "tests", "solution"):
            if (task.path / part).exists():
                shutil.copytree(task.path / part, copy / part, symlinks=True)
        leaked = holds_secret(copy)
        shutil.rmtree(copy)
        return OracleRun(seconds=0.0, reward=0.0 if leaked else 1.0, solve="exit 0")

    return oracle


@pytest.mark.parametrize(
    "part, target",
    [
        ("environment", "."),
        ("tests", "."),
        ("solution", "."),
        ("environment/x", "secret.txt"),
        ("environment/sub/y", "secret.txt"),
        ("tests/test.sh", "test.sh"),
        ("instruction.md", "secret.txt"),
    ],
)
def test_tasks_check_refuses_a_linked_environment_tests_or_solution(tmp_path, secret_dir, part, target):
    """Row 15: a link anywhere in a task is one problem naming it; nothing is copied, read or run."""
    path = make_task(tmp_path / "set")
    linked = path / part
    shutil.rmtree(linked) if linked.is_dir() else linked.unlink()
    linked.symlink_to(secret_dir / target)
    seen: list[Path] = []
    result = check_tasks(tmp_path / "set", oracle=_recording_oracle(seen))
    assert result.problems == [f"{linked}: {LINKS_REFUSED}"]
    assert seen == [] and result.rows == [] and result.invalid == 1 and not result.ok


def test_cli_tasks_check_on_a_linked_environment_prints_one_problem_and_never_the_secret(tmp_path, secret_dir):
    """Row 15 as reported: ``rl-assets tasks check`` copied a root-only directory, ran test.sh on it, printed it."""
    path = make_task(tmp_path / "set")
    (path / "tests" / "test.sh").write_text("#!/bin/bash\ncat /app/secret.txt; echo 1 > /logs/verifier/reward.txt\n")
    shutil.rmtree(path / "environment")
    (path / "environment").symlink_to(secret_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", "tasks", "check", str(tmp_path / "set")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"{path / 'environment'}: {LINKS_REFUSED}\n"
    assert SECRET not in proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("0 valid, 1 invalid task(s)")
