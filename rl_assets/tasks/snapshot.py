"""A task set recorded into the home: each task copied once, read-only, under the name of its world.

An experiment must not change under its own feet: once recorded, its tasks are
the snapshots, not the source directory, which the user may keep editing. A
snapshot is named by the task and the hash of every byte of its directory
(``task-<name>-<hash>``), which is also the id of the sealed world built from
its ``environment/``: editing any file of a task (its instruction, its tests)
makes another task, so resuming an experiment with an edited task set is a
changed config, refused like any other, and two task sets never share a world
by accident.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from pathlib import Path

from pydantic import ValidationError

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.hashing import tree_hash
from rl_assets.domain.names import InvalidNameError, check_task_name
from rl_assets.tasks.locality import kubernetes_refusals, local_fit
from rl_assets.tasks.task import InvalidTaskError, Task, load_task, task_dirs

TASK_WORLD_PREFIX = "task-"
"""Task worlds' ids start with this; the reference workload's are ``w<i>``."""


class TaskSetError(ValueError):
    """A task set that cannot be trained on here: every reason, one per line."""


def task_world_id(name: str, task_dir: Path) -> str:
    """The world (and snapshot) id of the task in ``task_dir``."""
    return f"{TASK_WORLD_PREFIX}{name}-{tree_hash(task_dir)}"


def is_task_world(world_id: str) -> bool:
    return world_id.startswith(TASK_WORLD_PREFIX)


def record_task_set(source: Path, snapshots: Path, on_kubernetes: bool = False) -> dict[str, str]:
    """Validate the task set at ``source``, snapshot each task under ``snapshots``; ``{task name: world id}``.

    Every problem of every task is gathered first; nothing is recorded unless
    all tasks are valid and run where the experiment runs: the local sandbox,
    or task pods on Kubernetes (:mod:`rl_assets.tasks.locality`).
    """
    if not source.is_dir():
        raise TaskSetError(f"{source}: not a directory of tasks")
    problems: list[str] = []
    found: dict[str, Path] = {}
    for path in task_dirs(source):
        try:
            name = check_task_name(path.name)
        except InvalidNameError as err:
            problems.append(f"{path}: the directory's name is a task name in trial ids, and {err}")
            continue
        links = [p for p in path.rglob("*") if p.is_symlink()]
        if links:
            problems.append(f"{links[0]}: a symbolic link (a task is copied as plain files; links are refused)")
            continue
        try:
            task = load_task(path)
        except InvalidTaskError as err:
            problems.extend(err.problems)
            continue
        refusals = kubernetes_refusals(task) if on_kubernetes else local_fit(task).refusals
        problems.extend(f"{path}: {reason}" for reason in refusals)
        if not refusals:
            found[name] = path
    if not found and not problems:
        problems.append(f"{source}: no task directories")
    if problems:
        raise TaskSetError("\n".join(problems))
    snapshots.mkdir(parents=True, exist_ok=True)
    worlds = {}
    for name, path in sorted(found.items()):
        world_id = task_world_id(name, path)
        _snapshot(path, snapshots / world_id)
        worlds[name] = world_id
    return worlds


def _snapshot(path: Path, target: Path) -> None:
    """Copy ``path`` to ``target`` read-only, atomically; an existing snapshot is the same bytes by its name."""
    if target.exists():
        return
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    shutil.copytree(path, staging, symlinks=False)
    for entry in [*staging.rglob("*"), staging]:
        mode = entry.stat().st_mode
        entry.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        os.rename(staging, target)
    except OSError:  # another process recorded the same snapshot first
        shutil.rmtree(staging, onerror=_writable_then_retry)


def _writable_then_retry(func, path, _exc) -> None:
    os.chmod(os.path.dirname(path), 0o755)
    func(path)


LOCAL_POLICY_ON_KUBERNETES = (
    "--policy local is served beside a local home, not on Kubernetes: serve the policy with vLLM and give "
    "--policy-url and --policy-model"
)


def with_recorded_task_set(config: ExperimentConfig, snapshots: Path, on_kubernetes: bool = False) -> ExperimentConfig:
    """``config`` with its task set recorded (an absolute source path and each task's world); others unchanged."""
    if config.tasks is None:
        return config
    if on_kubernetes and config.policy == "local":
        raise TaskSetError(LOCAL_POLICY_ON_KUBERNETES)
    source = Path(config.tasks).expanduser().resolve()
    worlds = record_task_set(source, snapshots, on_kubernetes)
    try:
        return config.with_changes(tasks=str(source), task_worlds=worlds)
    except ValidationError as err:
        raise TaskSetError(str(err.errors()[0]["msg"])) from None


def snapshot_task(snapshots: Path, world_id: str) -> Task:
    """The recorded task of a task world."""
    return load_task(snapshots / world_id)


def write_task_world(snapshots: Path, world_id: str, target: Path) -> None:
    """Write a task world's files (its recorded ``environment/``, made writable) into the new directory ``target``."""
    source = snapshots / world_id / "environment"
    if not source.is_dir():
        raise FileNotFoundError(f"task world {world_id} has no recorded task snapshot to build from")
    shutil.copytree(source, target, symlinks=True)
    for path in [*target.rglob("*"), target]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
