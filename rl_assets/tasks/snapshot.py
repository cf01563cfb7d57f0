"""A task set recorded into the home: each task copied once, read-only, under the name of its world.

An experiment must not change under its own feet: once recorded, its tasks are
the snapshots, not the source directory, which the user may keep editing. A
snapshot is named by the task and the hash of every byte of its directory
(``task-<name>-<hash>``), which is also the id of the sealed world built from
its ``environment/``: editing any file of a task (its instruction, its tests)
makes another task, so resuming an experiment with an edited task set is a
changed config, refused like any other, and two task sets never share a world
by accident.

The source is untrusted and may change while it is recorded (its author can
swap a file for a link to a root-only file between the check and the copy), so
there is no window between the two: the copy (:func:`copy_tree_nofollow`) opens
every directory and file through its parent's descriptor with ``O_NOFOLLOW``,
requires what it opened to be the plain file or directory it listed, and never
follows a link; the copy is then checked again (:func:`stage_task`), refused if
it is not what was checked, and named by the hash of the bytes it holds.
"""

from __future__ import annotations

import errno
import functools
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
from rl_assets.tasks.task import LINK_REFUSED, SPECIAL_REFUSED, InvalidTaskError, Task, load_task, task_dirs

TASK_WORLD_PREFIX = "task-"
"""Task worlds' ids start with this; the reference workload's are ``w<i>``."""


class TaskSetError(ValueError):
    """A task set that cannot be trained on here: every reason, one per line."""


def task_world_id(name: str, task_dir: Path) -> str:
    """The world (and snapshot) id of the task in ``task_dir``."""
    return f"{TASK_WORLD_PREFIX}{name}-{tree_hash(task_dir)}"


def is_task_world(world_id: str) -> bool:
    return world_id.startswith(TASK_WORLD_PREFIX)


def record_task_set(
    source: Path, snapshots: Path, on_kubernetes: bool = False, containers: bool = False
) -> dict[str, str]:
    """Validate the task set at ``source``, snapshot each task under ``snapshots``; ``{task name: world id}``.

    Every problem of every task is gathered first; nothing is recorded unless
    all tasks are valid and run where the experiment runs: the local sandbox,
    or task pods on Kubernetes (:mod:`rl_assets.tasks.locality`). Each task is
    then copied (:func:`stage_task`: no link followed, the copy checked again)
    and recorded under the hash of the copy's bytes; if any copy is refused,
    none is recorded.
    """
    if not source.is_dir():
        raise TaskSetError(f"{source}: not a directory of tasks")
    problems: list[str] = []
    found: dict[str, Task] = {}
    for path in task_dirs(source):
        try:
            name = check_task_name(path.name)
        except InvalidNameError as err:
            problems.append(f"{path}: the directory's name is a task name in trial ids, and {err}")
            continue
        try:
            task = load_task(path)  # a link or special file anywhere in the task is one of its problems
        except InvalidTaskError as err:
            problems.extend(err.problems)
            continue
        refusals = kubernetes_refusals(task) if on_kubernetes else local_fit(task, containers).refusals
        problems.extend(f"{path}: {reason}" for reason in refusals)
        if not refusals:
            found[name] = task
    if not found and not problems:
        problems.append(f"{source}: no task directories")
    if problems:
        raise TaskSetError("\n".join(problems))
    snapshots.mkdir(parents=True, exist_ok=True)
    staged: dict[str, Path] = {}
    try:
        for name, task in sorted(found.items()):
            staging = snapshots / f".{TASK_WORLD_PREFIX}{name}.{uuid.uuid4().hex}"
            try:
                stage_task(task, staging, read_only=True)
            except TaskCopyError as err:
                problems.append(str(err))
            else:
                staged[name] = staging
        if problems:
            raise TaskSetError("\n".join(problems))
        return {name: _publish(name, staging, snapshots) for name, staging in staged.items()}
    finally:
        for staging in staged.values():  # refused, or another process recorded the same snapshot first
            if staging.exists():
                _remove(staging)


def _publish(name: str, staging: Path, snapshots: Path) -> str:
    """Rename a staged copy to its snapshot, named by the hash of the bytes it holds; its world id."""
    world_id = task_world_id(name, staging)
    target = snapshots / world_id
    if not target.exists():  # an existing snapshot is the same bytes, by its name
        try:
            os.rename(staging, target)
        except OSError:  # another process recorded the same snapshot first
            pass
    return world_id


class TaskCopyError(ValueError):
    """A task that could not be copied as it was checked: one line naming the file and why."""


class UnsafeTreeError(TaskCopyError):
    """A symbolic link, a special file or a hard link to another owner's file, met while copying: never followed."""


_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""Opening what a directory lists: a link fails (ELOOP), a FIFO does not block, a terminal is not taken."""
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_DEPTH = 64
"""Directories nested deeper than this are refused (each level holds two descriptors)."""


def copy_tree_nofollow(src: Path, dst: Path, read_only: bool = False) -> None:
    """Copy the directory ``src`` to the new directory ``dst`` as plain files, never following a link.

    ``src`` itself is reached through its parents as given (the caller chose them); it and everything
    in it are opened through their parent's descriptor with ``O_NOFOLLOW`` and checked with ``fstat``
    to be the regular file or directory listed, so no link, made before the copy or during it, is ever
    followed: it is refused (:class:`UnsafeTreeError`), as are special files and a hard link to a file
    its directory's owner does not own. Modes are copied without setuid, setgid or sticky bits (and
    without write bits if ``read_only``); the copy is owned by the caller. On any refusal ``dst`` is
    removed and nothing of it is left.
    """
    try:
        src_fd = os.open(src, _OPEN)
    except OSError as err:
        raise _refusal(src, err) from None
    try:
        if not stat.S_ISDIR(os.fstat(src_fd).st_mode):
            raise UnsafeTreeError(f"{src}: not a directory")
        os.mkdir(dst, 0o700)
        try:
            dst_fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                _copy_directory(src_fd, dst_fd, src, read_only, 0)
            finally:
                os.close(dst_fd)
        except BaseException:
            _remove(dst)
            raise
    finally:
        os.close(src_fd)


def _copy_directory(src_fd: int, dst_fd: int, where: Path, read_only: bool, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise UnsafeTreeError(f"{where}: directories nested more than {MAX_DEPTH} deep")
    directory = os.fstat(src_fd)
    with os.scandir(src_fd) as listing:
        names = sorted(entry.name for entry in listing)
    for name in names:
        path = where / name
        try:
            listed = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise TaskCopyError(f"{path}: removed while it was being copied") from None
        if stat.S_ISLNK(listed.st_mode):
            raise UnsafeTreeError(f"{path}: {LINK_REFUSED}")
        if not (stat.S_ISREG(listed.st_mode) or stat.S_ISDIR(listed.st_mode)):
            raise UnsafeTreeError(f"{path}: {SPECIAL_REFUSED}")
        try:
            fd = os.open(name, _OPEN, dir_fd=src_fd)
        except OSError as err:
            raise _refusal(path, err) from None
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino, stat.S_IFMT(opened.st_mode)) != (
                listed.st_dev,
                listed.st_ino,
                stat.S_IFMT(listed.st_mode),
            ):
                raise UnsafeTreeError(f"{path}: replaced while it was being copied")
            if stat.S_ISDIR(opened.st_mode):
                os.mkdir(name, 0o700, dir_fd=dst_fd)
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst_fd)
                try:
                    _copy_directory(fd, child, path, read_only, depth + 1)
                finally:
                    os.close(child)
            else:
                if opened.st_nlink > 1 and opened.st_uid != directory.st_uid:
                    raise UnsafeTreeError(
                        f"{path}: a hard link to a file its directory's owner does not own (a task is copied as "
                        "plain files it owns)"
                    )
                _copy_file(fd, dst_fd, name, opened, read_only)
        finally:
            os.close(fd)
    _copy_mode(dst_fd, directory, read_only)


def _copy_file(src_fd: int, dst_fd: int, name: str, source: os.stat_result, read_only: bool) -> None:
    out = os.open(name, _CREATE, 0o600, dir_fd=dst_fd)
    with open(src_fd, "rb", closefd=False) as reader, open(out, "wb") as writer:
        shutil.copyfileobj(reader, writer, 1 << 20)
        writer.flush()
        _copy_mode(out, source, read_only)


def _copy_mode(fd: int, source: os.stat_result, read_only: bool) -> None:
    """The permission bits of ``source`` (no setuid, setgid or sticky; no write if ``read_only``) and its times."""
    mode = stat.S_IMODE(source.st_mode) & 0o777
    os.fchmod(fd, mode & ~0o222 if read_only else mode)
    os.utime(fd, ns=(source.st_atime_ns, source.st_mtime_ns))


def _refusal(path: Path, err: OSError) -> TaskCopyError:
    if err.errno == errno.ELOOP:
        return UnsafeTreeError(f"{path}: {LINK_REFUSED}")
    if err.errno == errno.ENOENT:
        return TaskCopyError(f"{path}: removed while it was being copied")
    return TaskCopyError(f"{path}: unreadable ({err.strerror})")


def stage_task(task: Task, target: Path, read_only: bool = False) -> Task:
    """Copy the checked ``task`` to the new directory ``target`` and check the copy again: the copy, as a task.

    What is used afterwards (recorded, or run by the oracle) is the copy, never the source: it is
    refused (:class:`TaskCopyError`, ``target`` removed) if it holds a link or special file
    (:func:`copy_tree_nofollow`) or is not what was checked (its config, instruction or file list
    changed in between).
    """
    copy_tree_nofollow(task.path, target, read_only=read_only)
    try:
        copied = load_task(target)
    except InvalidTaskError:
        copied = None
    if copied is None or _checked(copied) != _checked(task):
        _remove(target)
        raise TaskCopyError(
            f"{task.path}: changed while it was being copied (the copy is not the task that was checked); "
            "nothing of it is used"
        )
    return copied


def _checked(task: Task) -> tuple:
    """What checking a task looked at (the config as JSON: a nan in ``[metadata]`` equals itself)."""
    return task.config.model_dump_json(), task.instruction, task.environment_files, task.has_solution


def _remove(tree: Path) -> None:
    shutil.rmtree(tree, onerror=_writable_then_retry)


def _writable_then_retry(func, path, _exc) -> None:
    os.chmod(os.path.dirname(path), 0o755)
    func(path)


LOCAL_POLICY_ON_KUBERNETES = (
    "--policy local is served beside a local home, not on Kubernetes: serve the policy with vLLM and give "
    "--policy-url and --policy-model"
)


def with_recorded_task_set(
    config: ExperimentConfig, snapshots: Path, on_kubernetes: bool = False, containers: bool = False
) -> ExperimentConfig:
    """``config`` with its task set recorded (an absolute source path and each task's world); others unchanged.

    ``containers``: a container runtime is here, so tasks with an image run locally too."""
    if config.tasks is None:
        return config
    if on_kubernetes and config.policy == "local":
        raise TaskSetError(LOCAL_POLICY_ON_KUBERNETES)
    source = Path(config.tasks).expanduser().resolve()
    worlds = record_task_set(source, snapshots, on_kubernetes, containers)
    try:
        return config.with_changes(tasks=str(source), task_worlds=worlds)
    except ValidationError as err:
        raise TaskSetError(str(err.errors()[0]["msg"])) from None


def snapshot_task(snapshots: Path, world_id: str) -> Task:
    """The recorded task of a task world, loaded once a process: a snapshot is named by the hash of its bytes and
    read-only, so what it says does not change (a trial asked for its task three times, each a parse and a
    validation, hundreds of trials at once in a rollout worker)."""
    return _load_snapshot(snapshots / world_id)


@functools.lru_cache(maxsize=1024)
def _load_snapshot(path: Path) -> Task:
    return load_task(path)


def write_task_world(snapshots: Path, world_id: str, target: Path) -> None:
    """Write a task world's files (its recorded ``environment/``, made writable) into the new directory ``target``."""
    source = snapshots / world_id / "environment"
    if not source.is_dir():
        raise FileNotFoundError(f"task world {world_id} has no recorded task snapshot to build from")
    shutil.copytree(source, target, symlinks=True)
    for path in [*target.rglob("*"), target]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
