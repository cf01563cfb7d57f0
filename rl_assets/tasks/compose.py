"""A task's ``environment/docker-compose.yaml``, read the way Harbor uses it: sidecar services beside ``main``.

Harbor merges a task's compose file over its own base: ``main`` is the agent's container (built from
``environment/Dockerfile``, kept up with ``sleep infinity``), and the task adds sidecars (an API, an MCP
server, a database) and may make ``main`` wait for them (``depends_on``). What rl-assets runs of it is that
shape and nothing wider, because a compose file is untrusted input run by the trusted side:

- a sidecar: ``build`` (a context inside ``environment/``, an optional ``dockerfile`` in it) or ``image``,
  ``command``, ``environment``, ``expose`` (documentation only: nothing is published), ``healthcheck``,
  ``depends_on`` (``service_started`` or ``service_healthy``);
- ``main``: ``depends_on`` and ``environment`` only (the rest is the task's Dockerfile and rl-assets');
- any other key (``volumes``, ``ports``, ``privileged``, ``network_mode``, ``cap_add``, ...) is refused by
  name, as is a build context outside ``environment/``.

Everything is read into :class:`Compose` here; the containers layer starts it (:mod:`rl_assets.containers`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from rl_assets.tasks.task import COMPOSE_FILES, Task

MAIN = "main"
SIDECAR_KEYS = frozenset({"build", "image", "command", "environment", "expose", "healthcheck", "depends_on"})
MAIN_KEYS = frozenset({"depends_on", "environment"})
HEALTHCHECK_KEYS = frozenset({"test", "interval", "timeout", "retries", "start_period", "start_interval"})
CONDITIONS = ("service_started", "service_healthy")
SERVICE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
MAX_SERVICES = 8
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|s|m|h)")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ComposeError(ValueError):
    """The compose file is not one rl-assets runs; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Healthcheck:
    """Docker's healthcheck: ``argv`` run in the service (a ``CMD-SHELL`` test is ``sh -c``), its timings."""

    argv: tuple[str, ...]
    interval_s: float = 30.0
    timeout_s: float = 30.0
    retries: int = 3
    start_period_s: float = 0.0
    start_interval_s: float = 5.0


@dataclass(frozen=True)
class Sidecar:
    name: str
    context: Path | None
    """The build context (inside the task's ``environment/``), or None for an ``image``."""
    dockerfile: str = "Dockerfile"
    image: str | None = None
    command: tuple[str, ...] | None = None
    environment: dict[str, str] = field(default_factory=dict)
    healthcheck: Healthcheck | None = None
    depends_on: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Compose:
    """The sidecars in a start order (each after those it depends on), and what ``main`` waits for."""

    sidecars: tuple[Sidecar, ...]
    main_depends_on: dict[str, str]
    main_environment: dict[str, str]


def load_compose(task: Task) -> Compose:
    """The task's compose file as rl-assets runs it; :class:`ComposeError` listing every problem otherwise."""
    environment = task.path / "environment"
    name = next(f for f in COMPOSE_FILES if f in task.environment_files)
    where = f"environment/{name}"
    problems: list[str] = []
    try:
        data = yaml.safe_load((environment / name).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ComposeError([f"{where}: not YAML ({str(err).splitlines()[0][:200]})"]) from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise ComposeError([f"{where}: no services table"])
    if "Dockerfile" not in task.environment_files:
        problems.append(f"{where}: main is built from environment/Dockerfile, and there is none")
    if len(services) > MAX_SERVICES:
        problems.append(f"{where}: {len(services)} services (at most {MAX_SERVICES})")
    sidecars: dict[str, Sidecar] = {}
    main: dict[str, Any] = {}
    for service, spec in services.items():
        at = f"{where}: service {str(service)[:64]!r}"
        if not isinstance(service, str) or not SERVICE_NAME.match(service):
            problems.append(f"{at}: a service name is lowercase letters, digits, '_', '.', '-'")
            continue
        if not isinstance(spec, dict):
            problems.append(f"{at}: not a table")
            continue
        allowed = MAIN_KEYS if service == MAIN else SIDECAR_KEYS
        for key in sorted(set(spec) - allowed):
            problems.append(f"{at}: {str(key)[:64]!r} is not run by rl-assets (it runs: {', '.join(sorted(allowed))})")
        if service == MAIN:
            main = spec
            continue
        sidecar = _sidecar(service, spec, environment, at, problems)
        if sidecar is not None:
            sidecars[service] = sidecar
    main_depends = _depends_on(main.get("depends_on"), f"{where}: service 'main'", problems)
    for owner, depends in [(MAIN, main_depends), *((s.name, s.depends_on) for s in sidecars.values())]:
        for needed, condition in depends.items():
            if needed not in sidecars:
                problems.append(f"{where}: service {owner!r} depends on {needed!r}, which is not a sidecar here")
            elif condition == "service_healthy" and sidecars[needed].healthcheck is None:
                problems.append(f"{where}: service {owner!r} waits for {needed!r} to be healthy; it has no healthcheck")
    order = _start_order(sidecars, where, problems)
    main_environment = _environment(main.get("environment"), f"{where}: service 'main'", problems)
    if problems:
        raise ComposeError(list(dict.fromkeys(problems)))
    return Compose(tuple(sidecars[n] for n in order), main_depends, main_environment)


def _sidecar(name: str, spec: dict[str, Any], environment: Path, at: str, problems: list[str]) -> Sidecar | None:
    build, image = spec.get("build"), spec.get("image")
    context: Path | None = None
    dockerfile = "Dockerfile"
    if build is not None:
        build = {"context": build} if isinstance(build, str) else build
        if not isinstance(build, dict) or set(build) - {"context", "dockerfile"}:
            problems.append(f"{at}: build is a context path, or a table of context and dockerfile only")
            return None
        relative = PurePosixPath(str(build.get("context", ".")))
        dockerfile = str(build.get("dockerfile", "Dockerfile"))
        if relative.is_absolute() or ".." in relative.parts or "/" in dockerfile or ".." in dockerfile:
            problems.append(f"{at}: build context and dockerfile must stay inside environment/")
            return None
        context = environment / relative
        if not (context / dockerfile).is_file():
            problems.append(f"{at}: environment/{relative}/{dockerfile} is missing")
            return None
    elif not isinstance(image, str) or not image:
        problems.append(f"{at}: needs a build or an image")
        return None
    return Sidecar(
        name=name,
        context=context,
        dockerfile=dockerfile,
        image=None if context is not None else image,
        command=_command(spec.get("command"), at, problems),
        environment=_environment(spec.get("environment"), at, problems),
        healthcheck=_healthcheck(spec.get("healthcheck"), at, problems),
        depends_on=_depends_on(spec.get("depends_on"), at, problems),
    )


def _command(value: Any, at: str, problems: list[str]) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return tuple(str(v) for v in value)
    problems.append(f"{at}: command is a string or a list of strings")
    return None


def _environment(value: Any, at: str, problems: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list):
        value = dict(str(item).partition("=")[::2] for item in value)
    if not isinstance(value, dict) or not all(isinstance(k, str) and re.match(r"^\w+$", k) for k in value):
        problems.append(f"{at}: environment is a table (or list of NAME=value) of variable names")
        return {}
    return {k: "" if v is None else str(v) for k, v in value.items()}


def _depends_on(value: Any, at: str, problems: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list):
        return {str(name): "service_started" for name in value}
    if not isinstance(value, dict):
        problems.append(f"{at}: depends_on is a list or a table")
        return {}
    depends: dict[str, str] = {}
    for name, spec in value.items():
        condition = (spec or {}).get("condition", "service_started") if isinstance(spec, dict) else None
        if condition not in CONDITIONS:
            problems.append(f"{at}: depends_on {str(name)[:64]!r}: condition is one of {', '.join(CONDITIONS)}")
            continue
        depends[str(name)] = condition
    return depends


def _healthcheck(value: Any, at: str, problems: list[str]) -> Healthcheck | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - HEALTHCHECK_KEYS or "test" not in value:
        problems.append(
            f"{at}: healthcheck is a table with a test (and {', '.join(sorted(HEALTHCHECK_KEYS - {'test'}))})"
        )
        return None
    test = value["test"]
    if isinstance(test, str):
        argv: tuple[str, ...] = ("sh", "-c", test)
    elif isinstance(test, list) and len(test) >= 2 and test[0] == "CMD" and all(isinstance(t, str) for t in test):
        argv = tuple(test[1:])
    elif isinstance(test, list) and len(test) == 2 and test[0] == "CMD-SHELL" and isinstance(test[1], str):
        argv = ("sh", "-c", test[1])
    else:
        problems.append(f"{at}: healthcheck test is a string, [CMD, ...] or [CMD-SHELL, command]")
        return None
    retries = value.get("retries", 3)
    timed = HEALTHCHECK_KEYS & set(value) - {"test", "retries"}
    timings = {k: _seconds(value[k], f"{at}: healthcheck {k}", problems) for k in timed}
    if not isinstance(retries, int) or not 1 <= retries <= 100:
        problems.append(f"{at}: healthcheck retries is a whole number from 1 to 100")
        return None
    return Healthcheck(
        argv=argv,
        interval_s=timings.get("interval", 30.0),
        timeout_s=timings.get("timeout", 30.0),
        retries=retries,
        start_period_s=timings.get("start_period", 0.0),
        start_interval_s=timings.get("start_interval", 5.0),
    )


def _seconds(value: Any, at: str, problems: list[str]) -> float:
    """A compose duration (``2s``, ``1m30s``, ``500ms``; a bare number is seconds), at most an hour."""
    text = str(value).strip()
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif text and _DURATION.sub("", text) == "":
        seconds = sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(text))
    else:
        problems.append(f"{at}: {text[:40]!r} is not a duration (e.g. 2s, 1m30s)")
        return 0.0
    if not 0 <= seconds <= 3600:
        problems.append(f"{at}: {text[:40]!r} is outside 0s to 1h")
        return 0.0
    return seconds


def _start_order(sidecars: dict[str, Sidecar], where: str, problems: list[str]) -> list[str]:
    """Each sidecar after those it depends on; a cycle is a problem."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order or name not in sidecars:
            return
        if name in visiting:
            problems.append(f"{where}: depends_on makes a cycle through {name!r}")
            return
        visiting.add(name)
        for needed in sidecars[name].depends_on:
            visit(needed)
        visiting.discard(name)
        if name not in order:
            order.append(name)

    for name in sidecars:
        visit(name)
    return order
