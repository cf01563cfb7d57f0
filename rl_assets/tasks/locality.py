"""What of a valid task this machine can honour: settings it ignores, and reasons to refuse.

Harbor's schema describes containers on a provider. Locally, a task of plain files runs in the
bubblewrap sandbox (the machine's own read-only system directories, the world as the working
directory, no network, its own fixed resource limits), and a task with an image (a Dockerfile, a
``docker_image``, or a compose file's sidecars) in containers where Podman or Docker is installed
(:func:`_container_fit`). A setting neither can honour is either harmless to ignore (listed, so nobody
believes it applied) or changes what the task is (Windows, a separate verifier environment): such a
task is refused, on one line naming why.

On Kubernetes (:func:`kubernetes_refusals`) a task runs in a pod of its own on its ``docker_image``
(a task of plain files on the deployment's image); what is refused there is what that pod cannot
be: an image that would first have to be built, several containers, Windows, a host allowlist.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_assets.tasks.compose import ComposeError, load_compose
from rl_assets.tasks.task import COMPOSE_FILES, Task


@dataclass(frozen=True)
class LocalFit:
    """``ignored``: accepted settings without effect locally; ``refusals``: why the task cannot run locally."""

    ignored: tuple[str, ...]
    refusals: tuple[str, ...]

    @property
    def runs_locally(self) -> bool:
        return not self.refusals


def local_fit(task: Task, containers: bool = False) -> LocalFit:
    """How ``task`` fits this machine: the bubblewrap sandbox for plain files, a container for an image
    (``containers``: a container runtime is here)."""
    if task.in_container:
        return _container_fit(task, containers)
    env = task.config.environment
    ignored: list[str] = []
    for key in ("cpus", "memory_mb", "storage_mb"):
        if getattr(env, key) is not None:
            ignored.append(f"{key} (the local sandbox applies its own fixed limits)")
    if env.gpus:
        ignored.append("gpus (no accelerators locally)")
    if env.gpu_types is not None:
        ignored.append("gpu_types (no accelerators locally)")
    if env.tpu is not None:
        ignored.append("tpu (no accelerators locally)")
    if env.mcp_servers:
        ignored.append("mcp_servers (no MCP servers are started locally)")
    if env.effective_network_mode != "no-network":
        ignored.append(f"network_mode {env.effective_network_mode!r} (the local sandbox has no network)")
    if task.config.agent.network_mode or task.config.verifier.network_mode:
        ignored.append("[agent]/[verifier] network_mode (the local sandbox has no network)")
    if task.config.agent.user is not None or task.config.verifier.user is not None:
        ignored.append("[agent]/[verifier] user (the sandbox runs as one unprivileged user)")
    if env.healthcheck is not None:
        ignored.append("healthcheck (no services are started locally)")
    if env.skills_dir is not None:
        ignored.append("skills_dir")
    if task.config.verifier.continuous.enabled:
        ignored.append("[verifier.continuous] (the verifier runs once, after the agent)")
    if task.config.artifacts:
        ignored.append("artifacts (not collected locally)")
    return LocalFit(tuple(ignored), tuple(_refusals(task)))


def _container_fit(task: Task, containers: bool) -> LocalFit:
    """A task with an image runs in a container of it (:mod:`rl_assets.containers`)."""
    config, env = task.config, task.config.environment
    ignored: list[str] = []
    if env.storage_mb is not None:
        ignored.append("storage_mb (a container's disk is not capped locally)")
    if env.gpus or env.gpu_types is not None or env.tpu is not None:
        ignored.append("gpus/gpu_types/tpu (no accelerators locally)")
    if env.mcp_servers:
        ignored.append("mcp_servers (no MCP servers are started locally)")
    if env.network_mode is None:
        ignored.append("network (Harbor's default is public; a container gets none unless network_mode = 'public')")
    elif env.network_mode == "allowlist":
        ignored.append("network_mode 'allowlist' (the container gets no network)")
    if env.healthcheck is not None:
        ignored.append("healthcheck")
    if env.skills_dir is not None:
        ignored.append("skills_dir")
    if config.verifier.continuous.enabled:
        ignored.append("[verifier.continuous] (the verifier runs once, after the agent)")
    if config.artifacts:
        ignored.append("artifacts (not collected locally)")
    if any(step.artifacts or step.agent.user is not None for step in config.steps or []):
        ignored.append("[[steps]] artifacts and agent user (the steps run as the task's agent user; none collected)")
    not_for_containers = (
        "environment/Dockerfile",
        "[environment] docker_image",
        STEPS_NEED_A_CONTAINER,
        "environment/docker-compose",
    )
    reasons = [r for r in _refusals(task) if not r.startswith(not_for_containers)]
    if task.environment_kind == "compose":
        try:
            load_compose(task)
        except ComposeError as err:
            reasons.extend(err.problems)
    if not containers:
        image = f"[environment] docker_image {env.docker_image!r}"
        compose = next((f"environment/{f}" for f in COMPOSE_FILES if f in task.environment_files), "")
        what = {"dockerfile": "environment/Dockerfile", "image": image}.get(task.environment_kind, compose)
        reasons.insert(0, f"{what}: runs in a container, and no container runtime is here: {INSTALL_HINT}")
    return LocalFit(tuple(ignored), tuple(reasons))


def offline_hint(task: Task) -> list[str]:
    """For a failed oracle: the line saying its verifier had no network, where the task did not ask for one."""
    env = task.config.environment
    if not task.in_container or env.network_mode is not None:
        return []
    return [
        "its container had no network: the task sets no network_mode (Harbor's default is public, rl-assets' "
        "none); a test.sh that installs its tools (apt-get, uv from astral.sh, pip) needs "
        '[environment] network_mode = "public"'
    ]


INSTALL_HINT = "install Podman (Debian/Ubuntu: apt-get install podman runc)"


def _refusals(task: Task) -> list[str]:
    config, reasons = task.config, []
    kind = task.environment_kind
    image = config.environment.docker_image
    if kind == "compose":
        name = next(f for f in COMPOSE_FILES if f in task.environment_files)
        reasons.append(f"environment/{name}: its sidecar services run in local containers only (Podman or Docker)")
    elif kind == "dockerfile" and not image:
        reasons.append(
            "environment/Dockerfile: the local sandbox builds no image; build and push the image, then set "
            "[environment] docker_image to run it on Kubernetes"
        )
    elif kind == "dockerfile":
        reasons.append(
            f"environment/Dockerfile: the local sandbox runs no image; on Kubernetes the task runs on its "
            f"[environment] docker_image {image!r}"
        )
    elif kind == "image":
        reasons.append(f"[environment] docker_image {image!r}: the local sandbox runs no image; runs on Kubernetes")
    if config.environment.os != "linux":
        reasons.append(f"[environment] os {config.environment.os!r}: the local sandbox is Linux")
    if config.verifier.separate:
        reasons.append("[verifier] a separate verifier environment is not supported (locally or on Kubernetes)")
    if config.verifier.collect:
        reasons.append("[[verifier.collect]]: compose services are not supported (locally or on Kubernetes)")
    if config.steps:
        reasons.append(STEPS_NEED_A_CONTAINER)
    return reasons


STEPS_NEED_A_CONTAINER = (
    "[[steps]]: a multi-step task runs in a container; give it an environment/Dockerfile or a docker_image"
)


BUILD_AND_PUSH = (
    "environment/Dockerfile: Kubernetes runs a task in a pushed image and builds none; build and push it "
    "(docker build -t REGISTRY/NAME:TAG environment && docker push REGISTRY/NAME:TAG) and set "
    '[environment] docker_image = "REGISTRY/NAME:TAG" in task.toml'
)


def kubernetes_refusals(task: Task) -> tuple[str, ...]:
    """Why ``task`` cannot run in a task pod on Kubernetes (empty: it can)."""
    config, reasons = task.config, []
    env = config.environment
    kind = task.environment_kind
    if kind == "compose":
        name = next(f for f in COMPOSE_FILES if f in task.environment_files)
        reasons.append(f"environment/{name}: a multi-container environment is not run on Kubernetes yet")
    elif kind == "dockerfile" and not env.docker_image:
        reasons.append(BUILD_AND_PUSH)
    if env.os != "linux":
        reasons.append(f"[environment] os {env.os!r}: task pods are Linux")
    if env.network_mode == "allowlist":
        reasons.append("[environment] network_mode 'allowlist': a NetworkPolicy cannot allow host names")
    if env.gpus:
        reasons.append("[environment] gpus: task pods request no accelerators yet")
    if config.verifier.separate:
        reasons.append("[verifier] a separate verifier environment is not run on Kubernetes yet")
    if config.verifier.collect:
        reasons.append("[[verifier.collect]]: compose services are not run on Kubernetes yet")
    if config.steps:
        reasons.append("[[steps]]: multi-step tasks run in a local container, not on Kubernetes yet")
    return tuple(reasons)
