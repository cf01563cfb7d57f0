"""World store resource: sealed worlds, and rollouts on per-attempt forks of them.

This is the local implementation of both parts of an
:class:`~rl_assets.workloads.seams.Environment`: the
:class:`~rl_assets.workloads.seams.WorldStore` (build and seal a world, verify
it) and the :class:`~rl_assets.workloads.seams.Sandbox` (run one attempt in a
sandbox on a private fork). Locally,
forks are overlays mounted in the sandbox's keeper (``fork_mode="auto"`` picks
them where the OS allows, else a plain copy, and says which in the
materialization metadata), and the rollout runs in :mod:`rl_assets.sandbox.launcher`'s
bubblewrap sandbox; :class:`~rl_assets.resources.k8s_world_store.K8sWorldStoreResource`
implements the same protocols with PVCs cloned from VolumeSnapshots and pods
(``tests/test_workloads.py`` checks both against them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import dagster as dg

from rl_assets.containers.images import TaskImage, built_image, ensure_image
from rl_assets.containers.runtime import container_runtime
from rl_assets.containers.sessions import container_session
from rl_assets.domain.agent import Rollout
from rl_assets.domain.models import VerifierOutcome
from rl_assets.home.layout import Home
from rl_assets.sandbox.launcher import isolation, run_sandbox
from rl_assets.sandbox.protocol import CommandResult, ForkLayout
from rl_assets.sandbox.task_shell import TaskShell
from rl_assets.sandbox.task_trial import task_shell, verify
from rl_assets.tasks.snapshot import is_task_world, snapshot_task
from rl_assets.tasks.task import Task
from rl_assets.workloads.seams import AttemptFork, RequestFactory, TaskSession
from rl_assets.worlds.local import LocalWorlds


class WorldStoreResource(dg.ConfigurableResource):
    """Builds, seals and forks worlds under ``{home}/worlds`` and ``{home}/forks``."""

    home: str
    fork_mode: Literal["auto", "overlay", "copy"] = "auto"

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Fail at start-up, naming the install command, when the sandbox's tool (bubblewrap) is missing."""
        isolation()

    @property
    def _worlds(self) -> LocalWorlds:
        home = Home(Path(self.home))
        return LocalWorlds(home.worlds, home.forks, home.tasks)

    def ensure_built(self, world_id: str) -> tuple[str, bool]:
        return self._worlds.ensure_built(world_id)

    def ensure_image(self, world_id: str) -> TaskImage | None:
        """A task world's image, built once by the hash of its build context (None: a world of plain files).
        The ``task_images`` asset's work: a trial only finds it (:meth:`built_image`)."""
        task = self._container_task(world_id)
        if task is None:
            return None
        return ensure_image(container_runtime(), task, locks=Home(Path(self.home)).runtime / "image-locks")

    def built_image(self, world_id: str) -> TaskImage | None:
        """A task world's image as ``task_images`` built it (None: a world of plain files);
        :class:`~rl_assets.containers.images.ImageMissingError` if it is gone."""
        task = self._container_task(world_id)
        return None if task is None else built_image(container_runtime(), task)

    def _container_task(self, world_id: str) -> Task | None:
        if not is_task_world(world_id):
            return None
        task = self.task(world_id)
        return task if task.in_container else None

    def verified_hash(self, world_id: str) -> str:
        """The per-attempt check: the seal, O(entries), no bytes read (:mod:`rl_assets.worlds.local`)."""
        return self._worlds.verified_hash(world_id)

    def audited_hash(self, world_id: str) -> str:
        return self._worlds.audited_hash(world_id)

    def location(self, world_id: str) -> str:
        return str(self._worlds.world_dir(world_id))

    def use_overlay(self) -> bool:
        if self.fork_mode == "copy":
            return False
        available = isolation().overlay
        if self.fork_mode == "overlay" and not available:
            raise RuntimeError("fork_mode=overlay, but this machine cannot mount an overlay in a sandbox")
        return available

    def network_isolated(self) -> bool:
        return isolation().network_isolated

    def fork_kind(self) -> str:
        return "overlay" if self.use_overlay() else "copy"

    def rollout(self, fork: AttemptFork, make_request: RequestFactory, timeout_s: float) -> Rollout:
        """A bubblewrap process (:func:`~rl_assets.sandbox.launcher.run_sandbox`) on an overlay or copy fork."""
        with self._fork(fork) as layout:
            return run_sandbox(make_request(layout), timeout_s=timeout_s)

    def _fork(self, fork: AttemptFork) -> AbstractContextManager[ForkLayout]:
        """The attempt's fork under ``{home}/forks/{experiment}/{trial}/a{attempt}``, removed when the block ends."""
        return self._worlds.fork(fork.world_id, fork.owner, f"a{fork.attempt_id}", overlay=self.use_overlay())

    def task(self, world_id: str) -> Task:
        """The recorded task of a task world (its snapshot in the home)."""
        return snapshot_task(Home(Path(self.home)).tasks, world_id)

    def task_session(self, fork: AttemptFork, task: Task) -> AbstractContextManager[TaskSession]:
        return self._task_session(fork, task)

    @contextmanager
    def _task_session(self, fork: AttemptFork, task: Task) -> Iterator[TaskSession]:
        """A task trial's sandbox (:class:`~rl_assets.sandbox.task_shell.TaskShell`) on a private fork of the world;
        a task with an image: a container of it (:mod:`rl_assets.containers`), the image ``task_images`` built."""
        image = self.built_image(fork.world_id)
        if image is not None:
            with container_session(container_runtime(), task, image, f"{fork.owner}/a{fork.attempt_id}") as session:
                yield session
            return
        with (
            self._fork(fork) as layout,
            task_shell(task, layout) as shell,
        ):
            yield LocalTaskSession(shell, task)


@dataclass(frozen=True)
class LocalTaskSession:
    """The :class:`~rl_assets.workloads.seams.TaskSession` of the local sandbox."""

    shell: TaskShell
    task: Task

    def run(self, command: str, timeout_s: float) -> CommandResult:
        return self.shell.run(command, timeout_s)

    def verify(self, answer: str, deadline: float | None = None) -> VerifierOutcome:
        return verify(self.shell, self.task, answer, deadline).outcome()
