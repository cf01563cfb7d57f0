"""One container per trial attempt, from the task's image: the agent's commands in it, then the verifier.

The container only *stays up* (its command is ``sleep infinity``, behind the image's own entrypoint,
as Harbor runs it); the trusted side runs each of the agent's commands in it through ``exec``, then
the verifier, with :mod:`rl_assets.sandbox.exec_protocol`'s wrapper, caps and clean slate, exactly as
Kubernetes task pods do. What the container is, by construction:

- the task's image, its WORKDIR (or ``[environment] workdir``) as the commands' working directory,
  the image's USER for the agent's commands (root for the trusted phases), its ``[environment] env``;
- ``cpus`` and ``memory_mb`` as limits (Harbor's defaults where unset), a process limit, the
  runtime's open-file and process limits; ``storage_mb`` is not enforced (overlay size quotas need
  XFS project quotas, which few hosts have; Harbor's Docker environment ignores it too);
- no network unless the task allows it (``network_mode = "public"``, or ``allow_internet = true``);
- no capability beyond those a root process needs to install packages as Harbor's verifiers do
  (apt changes user and owner), and ``no-new-privileges``;
- labelled with the attempt that owns it and the worker process driving it, and removed when the
  attempt ends; :func:`reap` removes those whose worker is gone (a SIGKILLed worker cannot), and runs
  before every new container, so a crash leaves nothing behind for longer than the next attempt;
- for a compose task, beside its sidecars on a network of the attempt's own (:mod:`rl_assets.containers.sidecars`),
  all labelled and removed alike.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rl_assets.containers import sidecars
from rl_assets.containers.images import TaskImage
from rl_assets.containers.runtime import PROCESS_LIMITS, ContainerCommandError, ContainerRuntime
from rl_assets.domain.models import VerifierOutcome
from rl_assets.sandbox.exec_protocol import TOOLS_CHECK, CappedOutput, ContainerVerifier, timed_command, tree_archive
from rl_assets.sandbox.protocol import CommandResult
from rl_assets.sandbox.task_shell import OUTPUT_BYTES
from rl_assets.tasks.config import HealthcheckConfig, StepConfig
from rl_assets.tasks.steps import StepSetupError, step_dir, verifier_settings
from rl_assets.tasks.task import Task

OWNER_LABEL = "rl-assets.owner"
"""The attempt a container belongs to (``experiment/trial/a<attempt>``, or an oracle run's)."""
WORKER_LABEL = "rl-assets.worker"
"""The process driving it, as ``pid:start time`` (a pid alone may be reused)."""
DEFAULT_CPUS, DEFAULT_MEMORY_MB = 1.0, 2048
PIDS_LIMIT = 1024
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL")
SCRATCH = ("/tests", "/logs")
"""Emptied before the verifier: the places the harness fills for it."""
SETUP_WAIT_S = 120.0
REPLY_GRACE_S = 30.0
START_TIMEOUT_S = 120.0


class ContainerSessionError(RuntimeError):
    """The attempt's container could not be started or does not answer: the attempt is over."""


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of ``/proc/<pid>/stat``); None if it is gone
    or only a zombie (a SIGKILLed worker whose parent has not reaped it yet is dead all the same)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def worker_identity() -> str:
    """This process as :data:`WORKER_LABEL` says it."""
    return f"{os.getpid()}:{_start_time(os.getpid())}"


def _alive(identity: str) -> bool:
    pid, _, started = identity.partition(":")
    return pid.isdigit() and _start_time(int(pid)) == started


def reap(runtime: ContainerRuntime, networks: bool = True) -> list[str]:
    """Remove every task container (and, with ``networks``, compose network) whose worker is gone; the containers'
    names. Only compose attempts make networks, so only they (and ``rl-assets stop``) pay to look for them."""
    label = f'index .Labels "{WORKER_LABEL}"' if runtime.kind == "podman" else f'.Label "{WORKER_LABEL}"'
    listing = ["ps", "-a", "--filter", f"label={WORKER_LABEL}", "--format", "{{.Names}} {{" + label + "}}"]
    proc = runtime.run(listing, timeout_s=60)
    over = []
    for line in proc.stdout.decode().splitlines():
        name, _, identity = line.strip().partition(" ")
        if name and not _alive(identity):
            over.append(name)
    if over:
        runtime.run(["rm", "-f", "-t", "0", *over], timeout_s=120, check=False)
    labelled = sidecars.labelled_networks(runtime, WORKER_LABEL) if networks else {}
    dead = [network for network, identity in labelled.items() if not _alive(identity)]
    if dead:  # a compose attempt's network, its containers removed just above
        runtime.run(["network", "rm", *dead], timeout_s=120, check=False)
    return over


def container_name(owner: str) -> str:
    """A name the runtime accepts for ``owner``'s container: readable prefix, unique by hash."""
    return "rla-" + hashlib.sha256(owner.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class ContainerExec:
    """Runs commands in one running container through the runtime's ``exec``, as ``user`` (None: the image's)."""

    runtime: ContainerRuntime
    container: str
    user: str | None = None

    def command(
        self, command: str, timeout_s: float, *, workdir: str, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        """``bash -c command`` in ``workdir`` with ``env`` added, killed at ``timeout_s`` (exit code ``None``)."""
        return timed_command(self, command, timeout_s, workdir, env, REPLY_GRACE_S)

    def argv(
        self, argv: Sequence[str], wait_s: float, stdin: bytes | None = None, output_bytes: int = OUTPUT_BYTES
    ) -> tuple[int, CappedOutput]:
        """Run ``argv`` as is; its exit code and capped output, or :class:`ContainerSessionError` after ``wait_s``."""
        options = ["-i"] if stdin is not None else []
        options += ["--user", self.user] if self.user is not None else []
        proc = subprocess.Popen(
            self.runtime.argv("exec", *options, self.container, *argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        output = CappedOutput(output_bytes)
        reader = threading.Thread(target=_drain, args=(proc, output), daemon=True)
        reader.start()
        if stdin is not None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            code = proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise ContainerSessionError(
                f"container {self.container} did not report the command's end in time"
            ) from None
        finally:
            reader.join(timeout=5)
        return code, output


def _drain(proc: subprocess.Popen[bytes], output: CappedOutput) -> None:
    assert proc.stdout is not None
    while chunk := proc.stdout.read1(1 << 16):
        output.add(chunk)


ROOT = "0"
"""The user of the harness's own steps in a container (clearing, copying in, reading rewards)."""


@dataclass(frozen=True)
class ContainerTaskSession:
    """The :class:`~rl_assets.workloads.seams.TaskSession` of one attempt's container."""

    runtime: ContainerRuntime
    container: str
    task: Task
    workdir: str

    @property
    def agent(self) -> ContainerExec:
        """The agent's commands: as ``[agent] user``, else the image's user."""
        return ContainerExec(self.runtime, self.container, self.task.config.agent.user)

    @property
    def trusted(self) -> ContainerExec:
        return ContainerExec(self.runtime, self.container, ROOT)

    def run(self, command: str, timeout_s: float) -> CommandResult:
        return self.agent.command(command, timeout_s, workdir=self.workdir)

    def put(self, archive: bytes, directory: str) -> None:
        """Unpack a tar stream into ``directory`` (made if absent), as root."""
        script = 'mkdir -p -- "$1" && tar -x -f - -C "$1"'
        code, output = self.trusted.argv(["bash", "-c", script, "put", directory], SETUP_WAIT_S, archive)
        if code != 0:
            raise ContainerSessionError(f"could not copy files to {directory}: {output.text()[:500]}")

    def check_tools(self) -> None:
        """Refuse an image without the tools every command and the verifier's files go through."""
        code, output = self.trusted.argv(["bash", "-c", TOOLS_CHECK], SETUP_WAIT_S)
        missing = output.text().split()
        if code != 0 or missing:
            raise ContainerSessionError(
                f"the task's image lacks {', '.join(missing) or 'a working bash'}: "
                "a task container's commands need bash, timeout, env, head, tar and find"
            )

    def verify(self, answer: str, deadline: float | None = None) -> VerifierOutcome:
        """Test.sh as ``[verifier] user`` (root by default, as Harbor runs it), after the harness's clean slate."""
        return self._verifier(None).verify(self.task, answer, deadline)

    def verify_step(self, answer: str, deadline: float | None, step: StepConfig) -> VerifierOutcome:
        """A step's test.sh: the task's and the step's tests, the step's settings (:mod:`rl_assets.tasks.steps`)."""
        return self._verifier(step).verify(self.task, answer, deadline, step)

    def prepare_step(self, step: StepConfig) -> None:
        """Harbor's preparation of a step (:class:`~rl_assets.tasks.steps.StepEnvironment`): the last step's tests
        and verifier logs removed before the agent can read them, the step's ``workdir/`` copied in, its
        ``setup.sh`` run there as the agent, its healthcheck passed."""
        code, output = self.trusted.argv(["bash", "-c", "rm -rf -- /tests /logs/verifier"], SETUP_WAIT_S)
        if code != 0:
            raise ContainerSessionError(
                f"container {self.container}: the last step's tests stay: {output.text()[:300]}"
            )
        workdir = step_dir(self.task, step) / "workdir"
        if workdir.is_dir():
            self.put(tree_archive(workdir), self.workdir)
            if (workdir / "setup.sh").is_file():
                setup = self.agent.command(
                    f"bash {shlex.quote(self.workdir.rstrip('/') + '/setup.sh')}", SETUP_WAIT_S, workdir=self.workdir
                )
                if setup.exit_code != 0:
                    ended = "timed out" if setup.timed_out else f"exited {setup.exit_code}"
                    raise StepSetupError(f"step {step.name!r}: workdir/setup.sh {ended}", setup.output)
        if step.healthcheck is not None:
            self._healthcheck(step.name, step.healthcheck)

    def _healthcheck(self, name: str, check: HealthcheckConfig) -> None:
        """Docker's HEALTHCHECK rules: failures in ``start_period_sec`` do not count; ``retries`` failures do."""
        grace_ends = time.monotonic() + check.start_period_sec
        failures = 0
        while True:
            result = self.agent.command(check.command, check.timeout_sec, workdir=self.workdir)
            if result.exit_code == 0:
                return
            in_grace = time.monotonic() < grace_ends
            failures += 0 if in_grace else 1
            if failures >= check.retries:
                raise StepSetupError(f"step {name!r}: healthcheck failed {failures} times", result.output)
            time.sleep(check.start_interval_sec if in_grace else check.interval_sec)  # the check's own cadence

    def _verifier(self, step: StepConfig | None) -> ContainerVerifier:
        _, _, user = verifier_settings(self.task, step)
        return ContainerVerifier(
            self.trusted,
            ContainerExec(self.runtime, self.container, user or ROOT),
            self.workdir,
            SCRATCH,
            SETUP_WAIT_S,
            REPLY_GRACE_S,
            ContainerSessionError,
            f"container {self.container}",
        )


def labels(owner: str) -> list[str]:
    """The ``run`` (and ``network create``) labels that say whose a container is: what :func:`reap` reads."""
    return ["--label", f"{OWNER_LABEL}={owner}", "--label", f"{WORKER_LABEL}={worker_identity()}"]


def hardening(cpus: float, memory_mb: int) -> list[str]:
    """The ``run`` arguments every container of an attempt gets (see the module's docstring)."""
    args = [*PROCESS_LIMITS, "--pids-limit", str(PIDS_LIMIT), "--cap-drop", "ALL", "--cap-add", ",".join(CAPABILITIES)]
    return [*args, "--security-opt", "no-new-privileges", "--cpus", f"{cpus:g}", "--memory", f"{memory_mb}m"]


def run_args(
    task: Task, image: TaskImage, name: str, owner: str, network: str | None = None, hosts: Sequence[str] = ()
) -> list[str]:
    """``run`` arguments of an attempt's container; ``network``: a compose task's, with its sidecars' ``hosts``."""
    env = task.config.environment
    public = env.network_mode == "public"  # said explicitly (allow_internet = true says it too)
    args = ["run", "-d", "--name", name, "--hostname", "task", *labels(owner)]
    args += ["--network", network or ("bridge" if public else "none")]
    args += [arg for host in hosts for arg in ("--add-host", host)]
    args += hardening(env.cpus or DEFAULT_CPUS, env.memory_mb or DEFAULT_MEMORY_MB)
    for key, value in env.env.items():
        args += ["--env", f"{key}={value}"]
    return [*args, image.tag, "sleep", "infinity"]


@contextmanager
def container_session(
    runtime: ContainerRuntime, task: Task, image: TaskImage, owner: str
) -> Iterator[ContainerTaskSession]:
    """An attempt's container (and a compose task's sidecars), started and checked; removed when the block ends,
    whatever ended it.

    A container of the same owner still present was left by a killed attempt (attempts of one trial never
    overlap) and is removed first, with every container whose worker is gone.
    """
    name = container_name(owner)
    services = [service for service, _ in image.sidecars]
    reap(runtime, networks=bool(services))
    runtime.run(["rm", "-f", "-t", "0", name], timeout_s=120, check=False)
    if services:
        sidecars.remove(runtime, name, services)
    try:
        network, hosts = None, []
        if services:
            hardened = hardening(DEFAULT_CPUS, DEFAULT_MEMORY_MB)
            try:
                _, hosts = sidecars.start_sidecars(runtime, task, image, name, labels(owner), hardened)
            except sidecars.SidecarError as err:
                raise ContainerSessionError(str(err)) from None
            network = sidecars.network_name(name)
        try:
            runtime.run(run_args(task, image, name, owner, network, hosts), timeout_s=START_TIMEOUT_S)
        except ContainerCommandError as err:
            raise ContainerSessionError(f"the task's container did not start: {err}") from None
        workdir = task.config.environment.workdir or image.workdir
        session = ContainerTaskSession(runtime, name, task, workdir)
        session.check_tools()
        yield session
    finally:
        runtime.run(["rm", "-f", "-t", "0", name], timeout_s=120, check=False)
        if services:
            sidecars.remove(runtime, name, services)
