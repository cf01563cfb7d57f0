"""A task's ``docker-compose.yaml`` as rl-assets reads it (:mod:`rl_assets.tasks.compose`): Harbor's shape (sidecars
beside ``main``) runs; anything wider is refused by name before a container starts. Real task directories; the
sidecars run in real containers in ``tests/test_container_tasks.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_assets.tasks.compose import ComposeError, load_compose
from rl_assets.tasks.locality import local_fit
from rl_assets.tasks.task import load_task

HARBOR_STYLE = """\
services:
  main:
    depends_on:
      api:
        condition: service_healthy
    environment:
      MODE: test
  api:
    build:
      context: ./api
    expose: ["5000"]
    command: python3 server.py --port 5000
    environment: [TOKEN=abc, EMPTY=]
    healthcheck:
      test: ["CMD", "python3", "-c", "print(1)"]
      interval: 1m30s
      timeout: 500ms
      retries: 15
      start_period: 5s
  cache:
    image: localhost/cache:1
    depends_on: [api]
"""


def _task(root: Path, compose: str, sidecar_dirs: tuple[str, ...] = ("api",)) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("FROM debian\n")
    (root / "environment" / "docker-compose.yaml").write_text(compose)
    for name in sidecar_dirs:
        (root / "environment" / name).mkdir()
        (root / "environment" / name / "Dockerfile").write_text("FROM debian\n")
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text("exit 0\n")
    (root / "instruction.md").write_text("do it\n")
    (root / "task.toml").write_text("[verifier]\ntimeout_sec = 60.0\n")
    return root


def test_harbors_shape_is_read_with_its_start_order_healthchecks_and_durations(tmp_path):
    compose = load_compose(load_task(_task(tmp_path / "t", HARBOR_STYLE)))
    api, cache = compose.sidecars
    assert [s.name for s in compose.sidecars] == ["api", "cache"], "each after what it depends on"
    assert api.context == tmp_path / "t" / "environment" / "api" and api.image is None
    assert api.command == ("python3", "server.py", "--port", "5000")
    assert api.environment == {"TOKEN": "abc", "EMPTY": ""}
    check = api.healthcheck
    assert (check.argv, check.interval_s, check.timeout_s, check.retries, check.start_period_s) == (
        ("python3", "-c", "print(1)"),
        90.0,
        0.5,
        15,
        5.0,
    )
    assert (
        cache.image == "localhost/cache:1" and cache.context is None and cache.depends_on == {"api": "service_started"}
    )
    assert compose.main_depends_on == {"api": "service_healthy"} and compose.main_environment == {"MODE": "test"}


@pytest.mark.parametrize(
    ("compose", "problem"),
    [
        ("services:\n  api:\n    build: ./api\n    volumes: ['/:/host']\n", "'volumes' is not run by rl-assets"),
        ("services:\n  api:\n    build: ./api\n    privileged: true\n", "'privileged' is not run by rl-assets"),
        ("services:\n  api:\n    build: ./api\n    network_mode: host\n", "'network_mode' is not run by rl-assets"),
        ("services:\n  main:\n    build: .\n  api:\n    build: ./api\n", "service 'main': 'build' is not run"),
        ("services:\n  api:\n    build: ../../etc\n", "build context and dockerfile must stay inside environment/"),
        ("services:\n  api:\n    build: {context: ./api, dockerfile: ../x}\n", "must stay inside environment/"),
        ("services:\n  api:\n    build: ./nowhere\n", "environment/nowhere/Dockerfile is missing"),
        ("services:\n  api: {}\n", "needs a build or an image"),
        (
            "services:\n  main:\n    depends_on: {api: {condition: service_healthy}}\n  api:\n    build: ./api\n",
            "waits for 'api' to be healthy; it has no healthcheck",
        ),
        (
            "services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: y\n    depends_on: [a]\n",
            "depends_on makes a cycle",
        ),
        ("services:\n  main:\n    depends_on: [ghost]\n", "depends on 'ghost', which is not a sidecar here"),
        ("services:\n  api:\n    image: x\n    healthcheck: {test: [CMD, 'true'], interval: soon}\n", "not a duration"),
        ("services:\n  Bad_Name:\n    image: x\n", "a service name is lowercase"),
        ("services: [main]\n", "no services table"),
        ("{{{", "not YAML"),
    ],
)
def test_anything_wider_than_harbors_shape_is_refused_by_name(tmp_path, compose, problem):
    task = load_task(_task(tmp_path / "t", compose))
    with pytest.raises(ComposeError) as err:
        load_compose(task)
    assert any(problem in p for p in err.value.problems), err.value.problems
    refusals = local_fit(task, containers=True).refusals
    assert any(problem in r for r in refusals), "tasks check and train refuse it on the same line"


def test_a_valid_compose_task_runs_where_a_container_runtime_is_and_is_refused_where_none_is(tmp_path):
    task = load_task(_task(tmp_path / "t", HARBOR_STYLE))
    assert local_fit(task, containers=True).runs_locally
    (refusal,) = local_fit(task, containers=False).refusals
    assert refusal.startswith("environment/docker-compose.yaml: runs in a container, and no container runtime is here")
