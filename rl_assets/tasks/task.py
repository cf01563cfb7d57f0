"""A Harbor task directory read into a :class:`Task`, or every reason it cannot be.

The layout is Harbor's: ``instruction.md`` (what the agent is told), ``task.toml`` (its config),
``tests/test.sh`` (the verifier, copied in only after the agent is done), optionally
``solution/solve.sh`` (the oracle) and ``environment/`` (a ``Dockerfile``, a
``docker-compose.yaml``, or plain files that become the agent's working directory). All problems of
a directory are gathered, not just the first, each naming its file (and for ``task.toml`` the
table and key), so an author fixes a task in one pass. File contents are never quoted, except a
single offending ``task.toml`` value.

A task is untrusted input read by the trusted side (often as root): a task is plain files and
directories only. A symbolic link or a special file (a FIFO, a socket, a device) anywhere in it is
refused before anything of it is read (:func:`unsafe_entries`), and ``task.toml`` and
``instruction.md`` are opened without following a link, so no task can make ``train`` or ``tasks
check`` read, copy or run a file its author could not read. (A link made after this check is refused
again by the copy, which never follows one: :func:`rl_assets.tasks.snapshot.copy_tree_nofollow`.)
"""

from __future__ import annotations

import errno
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from rl_assets.tasks.config import TaskConfig
from rl_assets.tasks.problems import describe

EnvironmentKind = Literal["files", "dockerfile", "compose", "image"]
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")
LINK_REFUSED = "a symbolic link (a task is copied as plain files; links are refused)"
SPECIAL_REFUSED = "not a regular file or directory (a task is copied as plain files)"
MAX_UNSAFE_LISTED = 10
"""Links and special files named one per line; more are counted on one more line."""


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
    """``instruction.md``, verbatim; for a multi-step task every step's, each under a heading (the agent is given
    them one at a time: :mod:`rl_assets.tasks.steps`)."""
    environment_files: tuple[str, ...]
    """Paths under ``environment/``, relative to it, sorted."""
    has_solution: bool
    """``solution/solve.sh`` is there (a multi-step task: every step's ``steps/<name>/solution/solve.sh``)."""

    @property
    def name(self) -> str:
        """The ``[task]`` name if the task has one (Harbor's is optional), else the directory's."""
        return self.config.task.name if self.config.task else self.path.name

    @property
    def in_container(self) -> bool:
        """Its environment is an image (built, pulled, or with sidecars): it runs in a container, not bubblewrap."""
        return self.environment_kind != "files"

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
    """The task at ``path``; :class:`InvalidTaskError` listing every problem otherwise.

    The files required are Harbor's: ``environment/`` always; ``instruction.md`` unless the task has
    ``[[steps]]`` (then ``steps/<name>/instruction.md`` each); a test script for the task's OS
    (``test.sh``, or ``test.bat`` on Windows) in ``tests/`` (or a step's ``tests/``) unless a separate
    verifier environment brings its own.
    """
    unsafe = unsafe_entries(path)
    if unsafe:  # nothing of such a task is read
        raise InvalidTaskError(path, unsafe)
    problems: list[str] = []
    config, data = _read_config(path / "task.toml", problems)
    steps = config.steps if config else None
    instruction = ""
    if not steps and not (config is None and isinstance(data, dict) and data.get("steps")):
        instruction = _read_text(path / "instruction.md", problems) or ""
        if config is None or not config.verifier.separate:
            _require_test(path / "tests", config, problems)
    step_texts: list[str] = []
    for step in steps or []:
        step_texts.append(_read_text(path / "steps" / step.name / "instruction.md", problems) or "")
        if not config.verifier.separate and not step.verifier.separate:
            if not _test_script(path / "steps" / step.name / "tests", config):
                _require_test(path / "tests", config, problems, f" (nor in steps/{step.name}/tests/)")
    environment = path / "environment"
    if not environment.is_dir():
        problems.append(f"{environment}: missing (a task's environment directory, even if empty)")
    if problems or config is None:
        raise InvalidTaskError(path, list(dict.fromkeys(problems)))
    files = sorted(str(p.relative_to(environment)) for p in environment.rglob("*") if p.is_file())
    if steps:  # what the judge is told the agent was asked: every step's instruction, in order
        instruction = "\n\n".join(
            f"Step {n} of {len(steps)} ({step.name}):\n{text}"
            for n, (step, text) in enumerate(zip(steps, step_texts, strict=True), 1)
        )
        solved = all((path / "steps" / step.name / "solution" / "solve.sh").is_file() for step in steps)
    else:
        solved = (path / "solution" / "solve.sh").is_file()
    return Task(path, config, instruction, tuple(files), solved)


def _test_script(tests: Path, config: TaskConfig | None) -> Path | None:
    name = "test.bat" if config is not None and config.environment.os == "windows" else "test.sh"
    return tests / name if (tests / name).is_file() else None


def _require_test(tests: Path, config: TaskConfig | None, problems: list[str], note: str = "") -> None:
    if not _test_script(tests, config):
        name = "test.bat" if config is not None and config.environment.os == "windows" else "test.sh"
        problems.append(f"{tests / name}: missing (the verifier every task needs){note}")


def unsafe_entries(path: Path) -> list[str]:
    """One problem per symbolic link or special file in the task at ``path`` (itself included), never following one.

    ``path`` itself may be reached through links in its parents (the caller chose it), not be one.
    """
    if path.is_symlink():
        return [f"{path}: {LINK_REFUSED}"]
    found: list[str] = []
    directories = [path] if path.is_dir() else []
    while directories:
        directory = directories.pop()
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except OSError as err:
            found.append(f"{directory}: unreadable ({err.strerror})")
            continue
        for entry in entries:
            if entry.is_symlink():
                found.append(f"{entry.path}: {LINK_REFUSED}")
            elif entry.is_dir(follow_symlinks=False):
                directories.append(Path(entry.path))
            elif not entry.is_file(follow_symlinks=False):
                found.append(f"{entry.path}: {SPECIAL_REFUSED}")
    found.sort()
    if len(found) > MAX_UNSAFE_LISTED:
        more = len(found) - MAX_UNSAFE_LISTED
        found[MAX_UNSAFE_LISTED:] = [f"{path}: {more} more symbolic links or special files (refused likewise)"]
    return found


def _read_text(file: Path, problems: list[str]) -> str | None:
    """The UTF-8 text of ``file``, opened without following a link (a link is refused), or None and why not."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            problems.append(f"{file}: {LINK_REFUSED}")
        elif err.errno in (errno.ENOENT, errno.ENOTDIR):
            problems.append(f"{file}: missing")
        else:
            problems.append(f"{file}: unreadable ({err.strerror})")
        return None
    with open(fd, encoding="utf-8") as f:  # text mode, as Path.read_text: universal newlines
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            problems.append(f"{file}: missing")
            return None
        try:
            return f.read()
        except UnicodeDecodeError:
            problems.append(f"{file}: not UTF-8 text")
        except OSError as err:
            problems.append(f"{file}: unreadable ({err.strerror})")
    return None


def _read_config(file: Path, problems: list[str]) -> tuple[TaskConfig | None, dict | None]:
    """The parsed config (or None, its problems added) and the raw TOML it came from."""
    text = _read_text(file, problems)
    if text is None:
        return None, None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        problems.append(f"{file}: not valid TOML: {err}")
        return None, None
    try:
        return TaskConfig.model_validate(data), data
    except ValidationError as err:
        problems.extend(describe(str(file), data, err))
        return None, data


def is_task_dir(path: Path) -> bool:
    """Whether ``path`` looks like one task rather than a set of them."""
    return (path / "task.toml").exists() or (path / "instruction.md").exists()


def task_dirs(path: Path) -> list[Path]:
    """The task directories of ``path``: itself if it is a task, else its non-hidden subdirectories, sorted."""
    if is_task_dir(path):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
