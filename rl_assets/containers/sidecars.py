"""A compose task's sidecars (:mod:`rl_assets.tasks.compose`): started beside the attempt's container, on a
network of the attempt's own, and removed with it.

- The network is the attempt's alone, labelled like its containers so the reaper finds it. It is
  ``--internal`` (the services reach each other, nothing else) unless the task's network is public.
- Internal networks get no DNS in Podman (its dnsname plugin refuses them), so service names are given as
  ``--add-host`` entries: each sidecar knows those started before it (the ones it depends on), ``main``
  knows them all.
- Each sidecar is hardened as the attempt's container is (the same capabilities, ``no-new-privileges``,
  process and open-file limits, Harbor's default CPU and memory), runs its image's own command (or the
  compose ``command``), and publishes nothing.
- A dependency with ``condition: service_healthy`` is waited for by running its healthcheck through
  ``exec`` by Docker's rules (start period, interval, retries): Podman runs healthchecks only through
  systemd timers, and compose implementations ignore the condition without them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from rl_assets.containers.images import TaskImage
from rl_assets.containers.runtime import ContainerCommandError, ContainerRuntime
from rl_assets.tasks.compose import Compose, Healthcheck, Sidecar, load_compose
from rl_assets.tasks.task import Task

START_TIMEOUT_S = 120.0


class SidecarError(RuntimeError):
    """A sidecar did not start, or never became healthy: the attempt is over."""


def network_name(container: str) -> str:
    return f"{container}-net"


def sidecar_name(container: str, service: str) -> str:
    return f"{container}-{service}"


def start_sidecars(
    runtime: ContainerRuntime, task: Task, image: TaskImage, container: str, labels: list[str], hardening: list[str]
) -> tuple[Compose, list[str]]:
    """The network and every sidecar, each dependency healthy before what needs it; ``main``'s ``--add-host``
    entries. ``labels`` and ``hardening`` are the ``run`` arguments the attempt's container gets too."""
    compose = load_compose(task)
    network = network_name(container)
    public = task.config.environment.network_mode == "public"
    _run(runtime, ["network", "create", *([] if public else ["--internal"]), *labels, network], "its network")
    images = dict(image.sidecars)
    hosts: list[str] = []
    for sidecar in compose.sidecars:
        wait_healthy(runtime, container, compose, sidecar.depends_on)
        name = sidecar_name(container, sidecar.name)
        args = ["run", "-d", "--name", name, "--hostname", sidecar.name, "--network", network, *labels, *hardening]
        args += [arg for host in hosts for arg in ("--add-host", host)]
        args += [arg for key, value in sidecar.environment.items() for arg in ("--env", f"{key}={value}")]
        _run(runtime, [*args, images[sidecar.name].tag, *(sidecar.command or ())], f"sidecar {sidecar.name!r}")
        hosts.append(f"{sidecar.name}:{_address(runtime, name, network)}")
    wait_healthy(runtime, container, compose, compose.main_depends_on)
    return compose, hosts


def wait_healthy(runtime: ContainerRuntime, container: str, compose: Compose, depends_on: dict[str, str]) -> None:
    """Each of ``depends_on`` whose condition is ``service_healthy``, healthy (or :class:`SidecarError`)."""
    by_name = {s.name: s for s in compose.sidecars}
    for service, condition in depends_on.items():
        sidecar = by_name[service]
        if condition == "service_healthy" and sidecar.healthcheck is not None:
            _healthy(runtime, sidecar_name(container, service), sidecar, sidecar.healthcheck)


def _healthy(runtime: ContainerRuntime, name: str, sidecar: Sidecar, check: Healthcheck) -> None:
    grace_ends = time.monotonic() + check.start_period_s
    failures, last = 0, ""
    while True:
        try:
            proc = runtime.run(["exec", name, *check.argv], timeout_s=check.timeout_s, check=False)
        except ContainerCommandError as err:  # no answer at all: a failed check, as Docker counts one
            last = str(err)
        else:
            if proc.returncode == 0:
                return
            last = (proc.stdout or b"").decode(errors="replace")[-300:]
        in_grace = time.monotonic() < grace_ends
        failures += 0 if in_grace else 1
        if failures >= check.retries:
            raise SidecarError(f"sidecar {sidecar.name!r} never became healthy ({failures} failed checks): {last}")
        time.sleep(check.start_interval_s if in_grace else check.interval_s)  # the healthcheck's own cadence


def remove(runtime: ContainerRuntime, container: str, services: Iterable[str]) -> None:
    """The sidecars and the network of an attempt (whatever of them exists)."""
    names = [sidecar_name(container, s) for s in services]
    if names:
        runtime.run(["rm", "-f", "-t", "0", *names], timeout_s=120, check=False)
    runtime.run(["network", "rm", network_name(container)], timeout_s=120, check=False)


def labelled_networks(runtime: ContainerRuntime, label: str) -> dict[str, str]:
    """``{network: its value of label}`` of the networks carrying ``label``."""
    proc = runtime.run(["network", "ls", "-q", "--filter", f"label={label}"], timeout_s=60)
    names = proc.stdout.decode().split()
    if not names:
        return {}
    inspected = runtime.run(["network", "inspect", *names], timeout_s=60, check=False)
    found = {}
    for info in json.loads(inspected.stdout or b"[]"):
        labels = info.get("labels") or info.get("Labels") or {}
        found[info.get("name") or info.get("Name")] = labels.get(label, "")
    return found


def _run(runtime: ContainerRuntime, args: list[str], what: str) -> None:
    try:
        runtime.run(args, timeout_s=START_TIMEOUT_S)
    except ContainerCommandError as err:
        raise SidecarError(f"{what} did not start: {err}") from None


def _address(runtime: ContainerRuntime, name: str, network: str) -> str:
    proc = runtime.run(["inspect", name], timeout_s=60)
    (info,) = json.loads(proc.stdout)
    address = ((info.get("NetworkSettings") or {}).get("Networks") or {}).get(network, {}).get("IPAddress")
    if not address:
        raise SidecarError(f"sidecar {name} has no address on {network}")
    return address
