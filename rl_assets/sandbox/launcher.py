"""The sandbox's outside: start a rollout in bubblewrap, serve its tools, build its rollout from trusted evidence.

A rollout attempt, whatever the caller's uid:
- a *keeper* (``keeper.py``, trusted; forked for the attempt by this process's keeper zygote, so no interpreter
  starts per attempt) makes its own user and mount namespaces; this process writes their
  maps (as root: a fresh unprivileged host uid per attempt, so ``RLIMIT_NPROC`` is the attempt's own;
  otherwise the caller's uid). In its private mount namespace the keeper mounts the fork (an overlay of
  the sealed world whose upper dir is a size-limited tmpfs) and the read-only runtime files;
- bubblewrap (``bwrap``) then pivots into a minimal root (the interpreter, its shared libraries, the
  standard library without site-packages, the agent's own files under ``/app``, the fork as ``/fork``):
  a new user namespace, uid 1000, no capabilities, ``no_new_privs``, new pid/net/ipc/uts/cgroup
  namespaces, a new session, the seccomp filter of :mod:`rl_assets.sandbox.seccomp`, the rlimits of
  :class:`~rl_assets.sandbox.limits.Limits`, a cgroup where one can be made;
- the agent reads documents by asking this process over a pipe, which records each turn itself; its
  output is capped and read incrementally, and is never a result. The trajectory is the turns served
  here plus what the keeper finds in the fork after the sandbox exited (the files written,
  ``answer.txt``), every field capped.

Only where user namespaces are unavailable does it run a plain process on a plain copy (``isolation()``
says so, and the materialization metadata with it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rl_assets.domain.agent import Rollout
from rl_assets.domain.models import Turn
from rl_assets.domain.reference_policy import DOCS_DIR, SECRET_MARKER
from rl_assets.sandbox import keeper, seccomp
from rl_assets.sandbox.bubblewrap import bubblewrap
from rl_assets.sandbox.limits import AttemptCgroup, Limits
from rl_assets.sandbox.protocol import EXIT_FAULT, RESULT_MARKER, SandboxFault, SandboxRequest
from rl_assets.sandbox.runtime_files import bytecode, runtime, runtime_root
from rl_assets.sandbox.zygote import ForkedKeeper, Zygote, die_with_parent

SANDBOX_UID = 1000
"""The rollout's uid inside its user namespace."""
_PACKAGE = Path(__file__).resolve().parents[1]
DEFAULT_LIMITS = Limits()
TOOLS_ONLY = (DOCS_DIR,)
"""Fork directories hidden from the sandbox (an empty read-only tmpfs over them): the world's documents reach
the agent only through its read tool, served and recorded here, so no answer can come from an unrecorded read."""
_DOC_PATH = re.compile(rf"{DOCS_DIR}/doc_(\d+)\.txt", re.ASCII)


class SandboxTimeout(RuntimeError):
    """The rollout did not finish within its timeout and was killed."""


@dataclass(frozen=True)
class Isolation:
    name: str
    """``bwrap`` (the boundary described above) or ``none`` (a plain process: no user namespaces here)."""
    overlay: bool
    """Whether forks are overlays (O(1) in world size) rather than plain copies."""
    prefix: tuple[str, ...]
    """A command prefix giving a bare process user, mount, network and pid namespaces (benchmarks time it)."""
    bwrap: str
    """The bubblewrap binary and where it comes from; with ``none``, why it cannot start a sandbox here."""

    @property
    def network_isolated(self) -> bool:
        return self.name == "bwrap"


@dataclass(frozen=True)
class AgentProgram:
    """What a rollout runs: its files, copied read-only under ``/app``, and the one it starts."""

    files: tuple[tuple[str, str], ...]
    """(host path, path under ``/app``)."""
    entry: str = "main.py"
    interpreter: str = sys.executable
    """Any Python 3.11+: the agent and the keeper use only the standard library."""


REFERENCE_AGENT = AgentProgram(
    files=(
        (str(_PACKAGE / "sandbox" / "reference_agent.py"), "main.py"),
        (str(_PACKAGE / "__init__.py"), "rl_assets/__init__.py"),
        (str(_PACKAGE / "domain" / "__init__.py"), "rl_assets/domain/__init__.py"),
        (str(_PACKAGE / "domain" / "seeding.py"), "rl_assets/domain/seeding.py"),
        (str(_PACKAGE / "domain" / "reference_policy.py"), "rl_assets/domain/reference_policy.py"),
    )
)
"""The reference agent and the only modules it imports: not the world's secret, the verifier or the judge."""


@functools.cache
def isolation() -> Isolation:
    """The sandbox this machine grants; raises :class:`SandboxUnavailable` if no bubblewrap is installed."""
    found = bubblewrap()
    prefix = ("unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--kill-child")
    if found.problem is None:
        return Isolation("bwrap", overlay=True, prefix=prefix, bwrap=found.describe())
    return Isolation("none", overlay=False, prefix=(), bwrap=f"{found.describe()}: {found.problem}")


def write_maps(pid: int, sandbox_host_uid: int | None) -> None:
    """The keeper's uid and gid maps: as root, 0 and a fresh unprivileged uid; otherwise the caller alone, as 0."""
    if sandbox_host_uid is not None:
        for kind in ("uid_map", "gid_map"):
            Path(f"/proc/{pid}/{kind}").write_text(f"0 0 1\n{SANDBOX_UID} {sandbox_host_uid} 1\n")
        return
    Path(f"/proc/{pid}/setgroups").write_text("deny")
    Path(f"/proc/{pid}/uid_map").write_text(f"0 {os.geteuid()} 1\n")
    Path(f"/proc/{pid}/gid_map").write_text(f"0 {os.getegid()} 1\n")


def bwrap_argv(hostname: str, seccomp_fd: int, setenv: dict[str, str] | None = None) -> list[str]:
    """Bubblewrap's boundary, the same for every sandbox: new namespaces of every kind (no network), uid and
    gid 1000, no capability, a new session, dead with its parent, a clean environment, the seccomp filter on
    ``seccomp_fd``, a fresh ``/proc`` and a minimal, read-only ``/dev``. Callers append their mounts and command,
    and give the keeper ``bubblewrap().staged`` to stage (the binary's path is the keeper's view of it).

    bubblewrap's ``/dev`` is a tmpfs of half the host's memory owned by the sandbox's uid, with ``/dev/shm`` a
    directory on it: read-only, it holds nothing, and the keeper mounts the attempt's own sized ``/dev/shm`` on it
    (its device nodes and ``/dev/pts`` are mounts of their own, writable as before)."""
    argv = [bubblewrap().keeper_path, "--unshare-all", "--unshare-user", "--disable-userns"]
    argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", hostname, "--cap-drop", "ALL"]
    argv += ["--new-session", "--die-with-parent", "--clearenv"]
    for name, value in (setenv or {}).items():
        argv += ["--setenv", name, value]
    return [*argv, "--seccomp", str(seccomp_fd), "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]


def task_line(request: SandboxRequest) -> str:
    """The reference agent's task, one line of plain fields: ``trial_id max_turns fail_below hang prior...``.

    The tool protocol is plain text (this line, ``read <path>`` requests, length-framed replies) so the agent
    imports no codec: ``json`` and the ``re`` and ``enum`` it imports were 40% of a sandboxed agent's start.
    Floats are written as ``repr``, which ``float`` reads back exactly."""
    trial_id = request.spec.trial_id
    if not trial_id or any(c.isspace() for c in trial_id):
        raise ValueError(f"a trial id is one word, not {trial_id!r}")
    fields = [trial_id, str(request.spec.max_turns), repr(float(request.fail_below)), "1" if request.hang else "0"]
    return " ".join([*fields, *(repr(float(weight)) for weight in request.prior)])


def reply_frame(ok: bool, text: str) -> bytes:
    """A tool reply: ``ok <n>`` or ``error <n>``, a newline, then the ``n`` characters of the document or the reason
    (:func:`rl_assets.sandbox.reference_agent.read_reply` reads it)."""
    return f"{'ok' if ok else 'error'} {len(text)}\n{text}".encode()


def run_sandbox(
    request: SandboxRequest, timeout_s: float, program: AgentProgram = REFERENCE_AGENT, limits: Limits = DEFAULT_LIMITS
) -> Rollout:
    """Run one rollout attempt; raises SandboxFault, SandboxTimeout or RuntimeError (all: this trial fails)."""
    attempt = _Attempt(request, program, limits, timeout_s)
    try:
        return attempt.run()
    finally:
        attempt.close()


class _Attempt:
    """One sandbox run: its processes, pipes and cgroup, and the turns this side has served."""

    def __init__(self, request: SandboxRequest, program: AgentProgram, limits: Limits, timeout_s: float) -> None:
        self.request, self.program, self.limits, self.timeout_s = request, program, limits, timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.turns: list[Turn] = []
        self.output = bytearray()
        self.output_total = 0
        self.proc: subprocess.Popen | ForkedKeeper | None = None
        self.cgroup: AttemptCgroup | None = None
        self.scratch: str | None = None
        self.fds: list[int] = []

    # -- the two ways to start -------------------------------------------------------------------

    def run(self) -> Rollout:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        self.fds = [req_r, rep_w, out_r]
        task = task_line(self.request)
        if isolation().name == "bwrap":
            report = self._run_bwrap(task, req_w, rep_r, out_w, req_r, rep_w, out_r)
        else:
            report = self._run_plain(task, req_w, rep_r, out_w, req_r, rep_w, out_r)
        return self._rollout(report)

    def _run_bwrap(self, task: str, req_w: int, rep_r: int, out_w: int, *ours: int) -> dict:
        fork = self.request.fork
        base = Path(fork.upper).parent / "sandbox"
        for d in keeper.SANDBOX_DIRS:
            (base / d).mkdir(parents=True, exist_ok=True)
        binds, hidden, interpreter = runtime(self.program.interpreter)
        sec = seccomp.filter_fd()
        root = os.geteuid() == 0
        host_uid = (1 << 20) + secrets.randbelow(1 << 29) if root else None
        in_keeper_uid = SANDBOX_UID if root else 0
        config = {
            "base": str(base),
            "overlay": fork.kind == "overlay",
            "lower": fork.lower,
            "merged": fork.merged,
            "quota_bytes": self.limits.fork_bytes,
            "answer_cap": self.limits.answer_chars,
            "max_files": self.limits.files_written,
            "sandbox_uid": in_keeper_uid,
            "bwrap_uid": in_keeper_uid,
            "binds": [list(b) for b in binds],
            "runtime_root": runtime_root(binds),
            "app": [list(f) for f in (*self.program.files, *self._bytecode())],
            "hidden": list(hidden),
            "tools_only": list(TOOLS_ONLY),
            "fds": keeper.KEEPER_FDS,
            "rlimits": self.limits.rlimits(self.timeout_s),
            "task": task,
            "bwrap": bwrap_argv("rollout", seccomp_fd=5, setenv={"PATH": "/usr/bin"}),
            "tool": [list(t) for t in bubblewrap().staged],
            "command": [interpreter, "-S", "-E", "-s", "-B", f"/app/{self.program.entry}"],
        }
        self.cgroup = AttemptCgroup(self.limits) if root else None
        self.deadline = time.monotonic() + self.timeout_s  # the timeout is the sandbox's, not our set-up's
        self.proc = Zygote.of(self.program.interpreter).start_keeper([req_w, rep_r, out_w, sec])
        if self.cgroup is not None:
            self.cgroup.add(self.proc.pid)
        first = self.proc.stdout.readline()
        if first.strip() != b"unshared":
            raise RuntimeError(f"sandbox keeper failed to start: {first[:500].decode(errors='replace').strip()}")
        write_maps(self.proc.pid, host_uid)
        self.proc.stdin.write(json.dumps(config).encode() + b"\n")
        self.proc.stdin.flush()
        return self._serve(self.proc.stdout.fileno())

    def _bytecode(self) -> tuple[tuple[str, str], ...]:
        return bytecode(self.program.files, self.program.entry, self.program.interpreter)

    def _run_plain(self, task: str, req_w: int, rep_r: int, out_w: int, *ours: int) -> dict:
        """No user namespaces: the agent as a plain process on a plain copy (metadata says ``fork: copy``)."""
        fork = self.request.fork
        self.scratch = tempfile.mkdtemp(prefix="rl-assets-app-")
        for source, rel in self.program.files:
            Path(self.scratch, rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, Path(self.scratch, rel))

        def child() -> None:
            die_with_parent()
            for target, fd in zip(
                (3, 4, 1, 2), (os.dup(req_w), os.dup(rep_r), os.dup(out_w), os.dup(out_w)), strict=True
            ):
                os.dup2(fd, target)

        self.deadline = time.monotonic() + self.timeout_s  # the timeout is the sandbox's, not our set-up's
        self.proc = subprocess.Popen(
            [self.program.interpreter, "-S", "-E", "-s", "-B", str(Path(self.scratch, self.program.entry))],
            stdin=subprocess.PIPE,
            env={},
            cwd=fork.merged,
            pass_fds=(3, 4),
            preexec_fn=child,
        )
        for fd in (req_w, rep_r, out_w):
            os.close(fd)
        self.proc.stdin.write(task.encode() + b"\n")
        self.proc.stdin.close()
        self._serve(None)
        config = {
            "overlay": False,
            "merged": fork.merged,
            "lower": fork.lower,
            "answer_cap": self.limits.answer_chars,
            "max_files": self.limits.files_written,
        }
        return {"exit": self.proc.wait(), "files": keeper.written_files(config), "answer": keeper.read_answer(config)}

    # -- while it runs ---------------------------------------------------------------------------

    def _serve(self, report_fd: int | None) -> dict:
        """Serve tool calls and drain output until the keeper's report (or the plain process's exit)."""
        req_r, rep_w, out_r = self.fds
        sel = selectors.DefaultSelector()
        sel.register(req_r, selectors.EVENT_READ, "requests")
        sel.register(out_r, selectors.EVENT_READ, "output")
        if report_fd is not None:
            sel.register(report_fd, selectors.EVENT_READ, "report")
        pending = bytearray()
        report = bytearray()
        while sel.get_map():
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise SandboxTimeout(
                    f"rollout of {self.request.spec.trial_id} exceeded {self.timeout_s}s and was killed"
                )
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                elif key.data == "output":
                    self.output_total += len(chunk)
                    if self.output_total > self.limits.output_bytes:
                        raise RuntimeError(f"sandbox printed more than {self.limits.output_bytes} bytes; killed")
                    self.output += chunk
                elif key.data == "report":
                    report += chunk
                    if len(report) > 1 << 20:
                        raise RuntimeError("sandbox keeper report too large")
                else:
                    pending += chunk
                    while b"\n" in pending:
                        line, _, rest = pending.partition(b"\n")
                        pending = bytearray(rest)
                        self._reply(rep_w, self._tool(line))
                    if len(pending) > self.limits.tool_request_bytes:
                        raise RuntimeError("sandbox sent a tool request over the size limit")
            if report_fd is None and self.proc.poll() is not None and "requests" not in _names(sel):
                break
        if report_fd is None:
            return {}
        try:
            return json.loads(report)
        except ValueError:
            raise RuntimeError("sandbox keeper died without a report") from None

    def _tool(self, line: bytes) -> tuple[bool, str]:
        """One tool call, recorded here (the trusted side): a read of one of the world's documents.

        (ok, the document) or (False, why not). A request is a line ``read <path>``."""
        command, _, path = line.decode("utf-8", errors="replace").partition(" ")
        if command != "read" or not path:
            return False, "malformed tool request"
        match = _DOC_PATH.fullmatch(path)
        if match is None or int(match.group(1)) >= len(self.request.prior):
            return False, f"no such document: {path[:100]!r}"
        if len(self.turns) >= self.request.spec.max_turns:
            return False, "turn budget spent"
        if self.request.tool_latency_s:
            time.sleep(self.request.tool_latency_s)
        text = (Path(self.request.fork.lower) / path).read_text(encoding="utf-8")
        self.turns.append(Turn(doc=int(match.group(1)), found=SECRET_MARKER in text))
        return True, text

    def _reply(self, fd: int, reply: tuple[bool, str]) -> None:
        try:
            os.write(fd, reply_frame(*reply))
        except BrokenPipeError:
            pass

    # -- after -----------------------------------------------------------------------------------

    def _rollout(self, report: dict) -> Rollout:
        """The rollout from trusted evidence only: the turns served here and the keeper's look at the fork."""
        tail = self.output[-2000:].decode(errors="replace").strip()
        if "error" in report:
            raise RuntimeError(f"sandbox failed: {report['error']}")
        if report.get("exit") == EXIT_FAULT:
            raise SandboxFault(tail)
        if report.get("exit") != 0:
            raise RuntimeError(f"sandbox exited {report.get('exit')}: {tail[-500:]}")
        files, answer = report["files"], report["answer"] or ""
        cap = self.limits
        if len(files) > cap.files_written or any(len(f) > cap.path_chars for f in files):
            raise RuntimeError(f"rollout wrote more than {cap.files_written} files or a path over {cap.path_chars}")
        if len(answer) > cap.answer_chars:
            raise RuntimeError(f"rollout's answer.txt is over {cap.answer_chars} characters")
        return Rollout(turns=self.turns, answer=answer, files_written=files)

    def close(self) -> None:
        """Kill whatever is left of the attempt (its process group, its cgroup) and release its pipes."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)  # the keeper kills bubblewrap and reaps the whole sandbox
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=5)
            if self.proc.poll() is None:  # the keeper's group: itself, bubblewrap, and the sandbox's init
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            if isinstance(self.proc, ForkedKeeper):
                self.proc.close()
        if self.cgroup is not None:
            self.cgroup.kill_and_remove()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _names(sel: selectors.BaseSelector) -> set[str]:
    return {key.data for key in sel.get_map().values()}


def rollout_from_output(exit_code: int | None, out: str, err: str) -> Rollout:
    """A Kubernetes rollout pod's rollout, from the result line its runner printed (that path's own contract)."""
    if exit_code == EXIT_FAULT:
        raise SandboxFault(err.strip())
    for line in out.splitlines():
        if line.startswith(RESULT_MARKER):
            return Rollout.model_validate_json(line[len(RESULT_MARKER) :])
    raise RuntimeError(f"sandbox exited {exit_code} without a rollout: {err.strip()[-2000:]}")
