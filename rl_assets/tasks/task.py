"""A Harbor task directory read into a :class:`Task`, or every reason it cannot be.

The layout is Harbor's: ``instruction.md`` (what the agent is told), ``task.toml`` (its config),
``tests/test.sh`` (the verifier, copied in only after the agent is done), optionally
``solution/solve.sh`` (the oracle) and ``environment/`` (a ``Dockerfile``, a
``docker-compose.yaml``, or plain files that become the agent's working directory). All problems of
a directory are gathered, not just the first, each naming its file (and for ``task.toml`` the
table and key), so an author fixes a task in one pass. File contents are never quoted, except a
single offending ``task.toml`` value.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from rl_assets.tasks.config import TaskConfig
from rl_assets.tasks.problems import describe

EnvironmentKind = Literal["files", "dockerfile", "compose", "image"]
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")


class InvalidTaskError(Exception):
    """A task directory Harbor would not accept; ``problems`` holds one line per problem."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.path = path
        self.problems = problems


@dataclass(frozen=True)
class Task:
    """A validated task directory."""

    path: Path
    config: TaskConfig
    instruction: str
    environment_files: tuple[str, ...]
    """Paths under ``environment/``, relative to it, sorted."""
    has_solution: bool

    @property
    def name(self) -> str:
        """The ``[task]`` name if the task has one (Harbor's is optional), else the directory's."""
        return self.config.task.name if self.config.task else self.path.name

    @property
    def environment_kind(self) -> EnvironmentKind:
        """What builds the environment, in Harbor's order: compose, Dockerfile, image, else plain files."""
        files = set(self.environment_files)
        if files & set(COMPOSE_FILES):
            return "compose"
        if "Dockerfile" in files:
            return "dockerfile"
        if self.config.environment.docker_image:
            return "image"
        return "files"


def load_task(path: Path) -> Task:
    """The task at ``path``; :class:`InvalidTaskError` listing every problem otherwise."""
    problems: list[str] = []
    instruction = _read_text(path / "instruction.md", problems)
    if instruction is not None and not instruction.strip():
        problems.append(f"{path / 'instruction.md'}: is empty")
    config = _read_config(path / "task.toml", problems)
    if not (path / "tests" / "test.sh").is_file():
        problems.append(f"{path / 'tests' / 'test.sh'}: missing (the verifier every task needs)")
    environment = path / "environment"
    if environment.exists() and not environment.is_dir():
        problems.append(f"{environment}: must be a directory")
    if problems or config is None or instruction is None:
        raise InvalidTaskError(path, problems)
    files = sorted(str(p.relative_to(environment)) for p in environment.rglob("*") if p.is_file())
    return Task(path, config, instruction, tuple(files), (path / "solution" / "solve.sh").is_file())


def _read_text(file: Path, problems: list[str]) -> str | None:
    if not file.is_file():
        problems.append(f"{file}: missing")
        return None
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        problems.append(f"{file}: not UTF-8 text")
    except OSError as err:
        problems.append(f"{file}: unreadable ({err.strerror})")
    return None


def _read_config(file: Path, problems: list[str]) -> TaskConfig | None:
    text = _read_text(file, problems)
    if text is None:
        return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        problems.append(f"{file}: not valid TOML: {err}")
        return None
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as err:
        problems.extend(describe(str(file), data, err))
        return None


def is_task_dir(path: Path) -> bool:
    """Whether ``path`` looks like one task rather than a set of them."""
    return (path / "task.toml").exists() or (path / "instruction.md").exists()


def task_dirs(path: Path) -> list[Path]:
    """The task directories of ``path``: itself if it is a task, else its non-hidden subdirectories, sorted."""
    if is_task_dir(path):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
