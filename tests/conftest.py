"""Shared fixtures: one real home (embedded Postgres, Ray head) for the session."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import spec_oracle

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.home import Home
from rl_assets.resources.stores import Stores
from rl_assets.services.local_deployment import LocalDeployment
from rl_assets.stores.database import Database


def run_cli(home: Path, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``rl-assets`` as a user would: a separate process, with ``--home``."""
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"rl-assets {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def train_json(home: Path, *args: str) -> dict:
    return json.loads(run_cli(home, "train", *args, "--json").stdout)


def cli_args(name: str, fields: dict) -> list[str]:
    """``train`` arguments for an experiment config given as fields."""
    args = ["--experiment", name]
    for key, value in fields.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


Expectation = tuple[list, dict]
"""``(table, weights)`` shaped as in ``train --json``: ``table_of(result)`` and ``result["weights"]``."""


def _spec_config(config: ExperimentConfig) -> spec_oracle.Config:
    """The boundary to the spec oracle: the experiment's numbers, nothing of the package's logic."""
    return spec_oracle.Config(
        steps=config.steps,
        worlds=config.worlds,
        prompts=config.prompts,
        samples=config.samples,
        lr=config.lr,
        max_turns=config.max_turns,
        failed_trial_policy=config.failed_trial_policy,
    )


def _spec_rubric(name: str, weights: tuple[float, float, float] | None) -> spec_oracle.Rubric:
    """A built-in rubric by name (weights from the spec), or ``name`` with (correctness, efficiency, tidiness)."""
    return spec_oracle.BUILTIN_RUBRICS[name] if weights is None else spec_oracle.Rubric(name, *weights)


def oracle_expectation(
    config: ExperimentConfig,
    failed: frozenset[str] = frozenset(),
    rubric_weights: tuple[float, float, float] | None = None,
) -> Expectation:
    """What ``train`` of ``config`` must give, from the spec oracle (``tests/spec_oracle.py``).

    ``failed``: trial ids that failed for good. ``rubric_weights``: (correctness, efficiency, tidiness) of
    ``config.rubric`` when it is not a built-in.
    """
    run = spec_oracle.train(_spec_config(config), _spec_rubric(config.rubric, rubric_weights), failed)
    return run.table(), run.weights()


def rescored_expectation(
    config: ExperimentConfig, rubric: str, rubric_weights: tuple[float, float, float] | None = None
) -> Expectation:
    """What ``rescore --rubric RUBRIC`` of a trained ``config`` must give: its trajectories re-judged, retrained."""
    trained = spec_oracle.train(_spec_config(config), _spec_rubric(config.rubric, None))
    run = spec_oracle.rescore(trained, _spec_rubric(rubric, rubric_weights))
    return run.table(), run.weights()


def forked_expectation(
    parent: ExperimentConfig, rubric: str, rubric_weights: tuple[float, float, float] | None = None
) -> Expectation:
    """What ``fork --from PARENT --rubric RUBRIC`` must give: unchanged rollouts reused, the rest regenerated."""
    trained = spec_oracle.train(_spec_config(parent), _spec_rubric(parent.rubric, None))
    run = spec_oracle.fork(trained, _spec_rubric(rubric, rubric_weights))
    return run.table(), run.weights()


def table_of(result: dict) -> list:
    return [(s["mean_reward"], s["mean_turns"], s["trials_ok"]) for s in result["steps"]]


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
