"""A task's image: built once from its ``environment/`` by the hash of every byte of it, or pulled.

The tag is the hash of the build context (file names, executable bits and bytes), so an unchanged
task is never rebuilt, whoever asks and however often: a retried trial, a crashed worker's successor,
a fork, ``tasks check``. Builds of one tag are serialised by a lock file, so concurrent callers build
it once. Image builds are not reproducible (``apt-get update`` differs from day to day), so the
context hash, not the image digest, is the key; the digest is recorded beside it.

A build runs with the task's ``[environment] build_timeout_sec`` and the runtime's process limits;
a build that fails or times out is one :class:`ImageBuildError` carrying its log's tail.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rl_assets.containers.runtime import PROCESS_LIMITS, ContainerCommandError, ContainerRuntime, tail
from rl_assets.home.layout import ensure_private_dir
from rl_assets.tasks.compose import Sidecar, load_compose
from rl_assets.tasks.task import Task

IMAGE_REPOSITORY = "localhost/rl-assets-task"
CONTEXT_LABEL = "rl-assets.context"
LOG_TAIL_CHARS = 2000


class ImageMissingError(RuntimeError):
    """A container task's image is not in the runtime: ``task_images`` builds it (a trial never does)."""


class ImageBuildError(RuntimeError):
    """A task's image could not be built or pulled; ``log_tail`` is what the build printed last."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


@dataclass(frozen=True)
class TaskImage:
    """A task's image as the runtime has it."""

    tag: str
    context_hash: str
    image_id: str
    size_bytes: int
    workdir: str
    """The image's WORKDIR (``/`` if it sets none)."""
    user: str
    """The image's USER ('' for root)."""
    built: bool = False
    """Built by this call (False: it was there already)."""
    seconds: float = 0.0
    log_tail: str = ""
    sidecars: tuple[tuple[str, TaskImage], ...] = ()
    """A compose task's sidecar services' images, by service name (:mod:`rl_assets.tasks.compose`)."""

    @property
    def identity(self) -> str:
        """What the environment is, for a trajectory's identity: the image id, and each sidecar's."""
        return ",".join([self.image_id, *(f"{name}={image.image_id}" for name, image in self.sidecars)])


def context_hash(environment: Path) -> str:
    """The hash of a build context: every path under it, its kind, executable bit and bytes, in order."""
    digest = hashlib.sha256()
    for path in sorted(environment.rglob("*")):
        rel = path.relative_to(environment).as_posix()
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode):
            digest.update(f"d {rel}\0".encode())
        elif stat.S_ISREG(st.st_mode):
            digest.update(f"f {rel} {int(bool(st.st_mode & 0o111))} {st.st_size}\0".encode())
            digest.update(path.read_bytes())
        else:  # a loaded task has no links or special files (load_task refuses them)
            raise ValueError(f"{path}: not a regular file or directory")
    return digest.hexdigest()


def image_tag(task: Task, context: str) -> str:
    """``localhost/rl-assets-task/<task>:<context hash>``: the name says which task, the tag which bytes."""
    return f"{IMAGE_REPOSITORY}/{task.name}:{context[:40]}"


def built_image(runtime: ContainerRuntime, task: Task) -> TaskImage:
    """The task's image (and a compose task's sidecars') as the runtime has it, never built nor pulled here:
    :class:`ImageMissingError` if one is absent."""
    main = _found(runtime, task.name, _main_source(task))
    return dataclasses.replace(
        main,
        sidecars=tuple((s.name, _found(runtime, f"{task.name}'s {s.name}", _source(task, s))) for s in _sidecars(task)),
    )


def ensure_image(runtime: ContainerRuntime, task: Task, locks: Path | None = None) -> TaskImage:
    """The task's image (and a compose task's sidecars'), built (or pulled) if the runtime does not have it;
    built once across callers."""
    lock_dir = ensure_private_dir(locks or Path(tempfile.gettempdir()) / f"rl-assets-{os.geteuid()}-image-locks")
    timeout_s = task.config.environment.build_timeout_sec
    main = _ensured(runtime, task.name, _main_source(task), lock_dir, timeout_s)
    sidecars = tuple(
        (s.name, _ensured(runtime, f"{task.name}'s {s.name}", _source(task, s), lock_dir, timeout_s))
        for s in _sidecars(task)
    )
    built = [image for image in (main, *(i for _, i in sidecars)) if image.built]
    return dataclasses.replace(
        main,
        sidecars=sidecars,
        built=bool(built),
        seconds=sum(image.seconds for image in built),
        log_tail="\n".join(image.log_tail for image in built)[-LOG_TAIL_CHARS:],
    )


class Source(NamedTuple):
    """Where an image comes from: built from ``directory`` (with ``dockerfile``), or pulled (``directory`` None)."""

    name: str
    context: str
    """The build context's hash ('' for a pulled image)."""
    directory: Path | None
    dockerfile: str


def _main_source(task: Task) -> Source:
    if task.environment_kind == "image":
        return Source(task.config.environment.docker_image or "", "", None, "")
    environment = task.path / "environment"
    context = context_hash(environment)
    return Source(image_tag(task, context), context, environment, "Dockerfile")


def _sidecars(task: Task) -> tuple[Sidecar, ...]:
    return load_compose(task).sidecars if task.environment_kind == "compose" else ()


def _source(task: Task, sidecar: Sidecar) -> Source:
    if sidecar.context is None:
        return Source(sidecar.image or "", "", None, "")
    context = context_hash(sidecar.context)
    return Source(
        f"{IMAGE_REPOSITORY}/{task.name}/{sidecar.name}:{context[:40]}", context, sidecar.context, sidecar.dockerfile
    )


def _found(runtime: ContainerRuntime, what: str, source: Source) -> TaskImage:
    found = inspect(runtime, source.name, source.context)
    if found is None:
        raise ImageMissingError(
            f"{what}'s image {source.name} is not in {runtime.kind}: the task_images asset builds it"
        )
    return found


def _ensured(runtime: ContainerRuntime, what: str, source: Source, lock_dir: Path, timeout_s: float) -> TaskImage:
    if source.directory is None:
        return _pulled(runtime, source.name)
    found = inspect(runtime, source.name, source.context)
    if found is not None:
        return found
    with open(lock_dir / f"{source.context}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = inspect(runtime, source.name, source.context)  # built by whoever held the lock before us
        if found is not None:
            return found
        return _build(runtime, what, source, timeout_s)


def _build(runtime: ContainerRuntime, what: str, source: Source, timeout_s: float) -> TaskImage:
    assert source.directory is not None
    tag, context = source.name, source.context
    args = ["build", *PROCESS_LIMITS, "--label", f"{CONTEXT_LABEL}={context}", "-t", tag]
    args += ["-f", str(source.directory / source.dockerfile), str(source.directory)]
    start = time.monotonic()
    proc = subprocess.Popen(runtime.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        raise ImageBuildError(
            f"building {what}'s image ran past [environment] build_timeout_sec ({timeout_s:g}s)",
            tail(output, LOG_TAIL_CHARS),
        ) from None
    log = tail(output, LOG_TAIL_CHARS)
    if proc.returncode != 0:
        raise ImageBuildError(f"building {what}'s image failed (exit {proc.returncode}): {tail(output, 300)}", log)
    image = inspect(runtime, tag, context)
    if image is None:
        raise ImageBuildError(f"{runtime.kind} built {tag} but does not list it", log)
    return dataclasses.replace(image, built=True, seconds=time.monotonic() - start, log_tail=log)


def _pulled(runtime: ContainerRuntime, name: str) -> TaskImage:
    found = inspect(runtime, name, "")
    if found is not None:
        return found
    try:
        runtime.run(["pull", name], timeout_s=1800)
    except ContainerCommandError as err:
        raise ImageBuildError(f"[environment] docker_image {name!r}: {err}") from None
    found = inspect(runtime, name, "")
    if found is None:
        raise ImageBuildError(f"{runtime.kind} pulled {name} but does not list it")
    return found


def inspect(runtime: ContainerRuntime, tag: str, context: str) -> TaskImage | None:
    """The image ``tag`` if the runtime has it, else None."""
    proc = runtime.run(["image", "inspect", tag], timeout_s=60, check=False)
    if proc.returncode != 0:
        return None
    (info,) = json.loads(proc.stdout)
    config = info.get("Config") or {}
    return TaskImage(
        tag=tag,
        context_hash=context,
        image_id=info["Id"].removeprefix("sha256:"),
        size_bytes=int(info.get("Size") or 0),
        workdir=config.get("WorkingDir") or "/",
        user=config.get("User") or "",
    )
