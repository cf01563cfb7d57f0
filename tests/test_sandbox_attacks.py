"""Hostile rollouts through the real sandbox: each case is a real escape attempt that fails this test if it works.

The hostile code (``tests/hostile/attacks.py``) runs *as the rollout*: launched by the same launcher, in
the same bubblewrap sandbox, keeper and limits as the reference agent, with the reference agent's own
files beside it. Each case then checks from outside: the host is untouched, the trial failed or was
scored on trusted evidence only, Postgres answers and its ledgers are unchanged, and no process or
mount of the attempt is left. Every case runs twice: launched by root, and launched by a child process
that dropped to ``nobody`` (no cgroup then: the rlimits and the user namespace hold alone). The cases on the
sandbox's own limits and mount table (``launch``) need no home; the others (``attack``) check Postgres too.

The home and the fork are under paths holding :data:`MARKER` (the arena's name, the fork's owner), so a host
path showing through the sandbox's mount table is found by name.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rl_assets.domain.agent import Rollout
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Rubric, Trajectory, Turn
from rl_assets.domain.rubrics import BUILTIN_RUBRICS
from rl_assets.domain.scoring import reward_of, simulated_judge
from rl_assets.domain.waiting import Waiting
from rl_assets.domain.world import world_secret
from rl_assets.home.layout import Home
from rl_assets.home.services.postgres import PostgresInfo
from rl_assets.sandbox import runtime_files
from rl_assets.sandbox.launcher import REFERENCE_AGENT, AgentProgram, SandboxTimeout, isolation, run_sandbox
from rl_assets.sandbox.limits import CGROUP_ROOT, PREFIX, Limits
from rl_assets.sandbox.protocol import RESULT_MARKER, SandboxRequest
from rl_assets.stores.home_stores import Stores
from rl_assets.worlds.local import LocalWorlds

SPEC = ExperimentConfig(name="attack").trials(0)[0]
HOSTILE = Path(__file__).parent / "hostile" / "attacks.py"
NOBODY = 65534
UNPRIVILEGED_PYTHON = "/usr/bin/python3.11"
"""The launcher's interpreter for the unprivileged caller: root's pyenv under /root is not reachable by nobody."""
LEDGERS = ("rl_experiments", "rl_generation_attempts", "rl_verdicts", "rl_judge_calls")
MARKER = "SECRETHOMEMARKER"
"""In the arena's path (where the home's worlds and forks are) and in the fork's owner (an experiment and trial)."""
OWNER = f"experiment-{MARKER}-trial"


@dataclass
class Outcome:
    rollout: Rollout | None
    error: str | None
    """``TypeName: message`` of the exception that failed the trial."""
    seconds: float

    @property
    def seen(self) -> dict:
        """What the hostile rollout observed inside (it writes that into ``answer.txt``)."""
        assert self.rollout is not None, f"the trial failed: {self.error}"
        return json.loads(self.rollout.answer)


def _hostile(workdir: Path, attack: str, params: dict, interpreter: str, source: Path = HOSTILE) -> AgentProgram:
    spec = workdir / "attack.json"
    spec.write_text(json.dumps({"name": attack, "params": params}))
    spec.chmod(0o644)
    files = tuple(f for f in REFERENCE_AGENT.files if f[1] != "main.py")
    return AgentProgram(files=((str(source), "main.py"), (str(spec), "attack.json"), *files), interpreter=interpreter)


def _launch(worlds: LocalWorlds, program: AgentProgram, limits: Limits, timeout_s: float) -> Outcome:
    start = time.monotonic()
    try:
        with worlds.fork("w0", OWNER, "a0", overlay=True) as fork:
            rollout = run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork), timeout_s, program, limits)
        return Outcome(rollout, None, time.monotonic() - start)
    except Exception as err:  # the trial failed: what matters is that nothing escaped
        return Outcome(None, f"{type(err).__name__}: {err}", time.monotonic() - start)


def _as_nobody(worlds: LocalWorlds, program: AgentProgram, limits: Limits, timeout_s: float, conn) -> None:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    outcome = _launch(worlds, program, limits, timeout_s)
    conn.send((outcome.rollout.model_dump_json() if outcome.rollout else None, outcome.error, outcome.seconds))
    conn.close()


@pytest.fixture(params=["root", "nobody"])
def caller(request) -> str:
    if os.geteuid() != 0:
        pytest.fail("the matrix launches as root and as nobody: run it as root")
    if isolation().name != "bwrap":
        pytest.fail(f"isolation {isolation().name!r}: no user namespaces for the sandbox on this machine")
    return request.param


@pytest.fixture
def arena(caller: str) -> Iterator[Path]:
    """A world-traversable directory for the world (built by root) and the forks (owned by the caller)."""
    root = Path(tempfile.mkdtemp(prefix=f"rl-assets-attack-{MARKER}-", dir="/tmp"))
    root.chmod(0o755)
    worlds = LocalWorlds(root / "worlds", root / "forks")
    worlds.ensure_built("w0")
    worlds.forks_root.mkdir()
    if caller == "nobody":
        os.chown(worlds.forks_root, NOBODY, NOBODY)
    yield root
    subprocess.run(["rm", "-rf", str(root)], check=False)


def _ledger_counts(stores: Stores) -> dict[str, int]:
    """Postgres answers, and how many rows each ledger holds."""
    assert stores.db.scalar("SELECT 1") == 1
    return {table: stores.db.scalar(f"SELECT count(*) FROM {table}") for table in LEDGERS}  # noqa: S608


def _sandbox_processes(known: set[str]) -> set[int]:
    """Processes of a sandbox's uids (a fresh one >= 2**20 per attempt as root; nobody) in a new user namespace."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            userns = os.readlink(f"/proc/{pid}/ns/user")
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if userns not in known and (uid >= 1 << 20 or uid == NOBODY):
            found.add(int(pid))
    return found


def _describe(pids: set[int]) -> list[str]:
    described = []
    for pid in pids:
        try:
            status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
            described.append(f"{pid} {status['Name']} {status['State']} ppid {status['PPid']}")
        except (OSError, ValueError, KeyError):
            described.append(f"{pid} (gone)")
    return described


def _user_namespaces() -> set[str]:
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found.add(os.readlink(f"/proc/{pid}/ns/user"))
        except OSError:
            pass
    return found


CONTAINER_RUNTIME_MOUNTS = ("/var/lib/containers/", "/run/containers/", "/run/netns/")
"""Where Podman mounts a container's root, its ``/dev/shm`` and its network namespace: a container test running
beside this one (the end-to-end tier runs two files at once) mounts and unmounts there, and no attempt here does."""


def _mounts() -> set[str]:
    """The host's mounts (root and mount point), the container runtime's left out."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    mounts = (line.split()[3:5] for line in lines)
    return {f"{root} {point}" for root, point in mounts if not point.startswith(CONTAINER_RUNTIME_MOUNTS)}


def _attempt_cgroups() -> set[Path]:
    """This process's attempt cgroups (named by the launcher's pid: other launchers may run concurrently)."""
    return {p for c in ("pids", "memory", "cpu", "unified") for p in (CGROUP_ROOT / c).glob(f"{PREFIX}{os.getpid()}-*")}


@pytest.fixture
def launch(caller: str, arena: Path) -> Iterator[Callable[..., Outcome]]:
    """Run a hostile rollout through the real launcher; afterwards check that it left nothing behind."""
    worlds = LocalWorlds(arena / "worlds", arena / "forks")
    namespaces, mounts, cgroups = _user_namespaces(), _mounts(), _attempt_cgroups()

    def run(
        name: str, params: dict, limits: Limits | None = None, timeout_s: float = 30, source: Path = HOSTILE
    ) -> Outcome:
        limits = limits or Limits()
        interpreter = UNPRIVILEGED_PYTHON if caller == "nobody" else REFERENCE_AGENT.interpreter
        program = _hostile(arena, name, params, interpreter, source)
        if caller == "root":
            return _launch(worlds, program, limits, timeout_s)
        ctx = multiprocessing.get_context("fork")
        ours, theirs = ctx.Pipe()
        child = ctx.Process(target=_as_nobody, args=(worlds, program, limits, timeout_s, theirs))
        child.start()
        assert ours.poll(timeout_s + 60), "the unprivileged launcher did not answer"
        rollout, error, seconds = ours.recv()
        child.join(10)
        return Outcome(Rollout.model_validate_json(rollout) if rollout else None, error, seconds)

    yield run
    leaving = Waiting(timeout_s=5, interval_s=0.05).deadline()  # a SIGKILLed process leaves the table a moment later
    while (left := _sandbox_processes(namespaces)) and not leaving.expired():
        leaving.sleep()
    assert left == set(), f"no process of the attempt is left: {_describe(left)}"
    assert _mounts() == mounts, "no mount of the attempt is left on the host"
    assert not any("rl-assets-fork" in m for m in _mounts())
    assert _attempt_cgroups() == cgroups == set(), "the attempt's cgroups are removed"
    assert list((arena / "forks").iterdir()) == [], "the fork is removed"


@pytest.fixture
def attack(launch: Callable[..., Outcome], stores: Stores) -> Iterator[Callable[..., Outcome]]:
    """:func:`launch`, and afterwards: Postgres answers and its ledgers are unchanged (the session's home)."""
    ledgers = _ledger_counts(stores)
    yield launch
    assert _ledger_counts(stores) == ledgers, "Postgres answers and its ledgers are unchanged"


def _host_targets(arena: Path, home: Path) -> dict[str, Path]:
    return {
        "world": arena / "worlds" / "w0" / "docs" / "escaped.txt",
        "home": home / "escaped.txt",
        "tmp": Path("/tmp/rl-assets-escaped.txt"),
        "root": Path("/rl-assets-escaped.txt"),
    }


def _assert_nothing_written(targets: dict[str, Path]) -> None:
    written = {k: str(p) for k, p in targets.items() if p.exists()}
    assert written == {}, f"the rollout wrote outside its fork: {written}"


def test_clearing_read_only_with_mount_setattr_is_refused(attack, arena, home):
    targets = _host_targets(arena, home)
    out = attack("mount_setattr", {"targets": [str(p) for p in targets.values()]})
    assert out.seen["mount_setattr"] == "EPERM"
    assert "written" not in out.seen["writes"].values()
    _assert_nothing_written(targets)


def test_remounting_is_refused(attack, arena, home):
    targets = _host_targets(arena, home)
    out = attack("remount", {"targets": [str(p) for p in targets.values()]})
    assert (out.seen["remount_rw"], out.seen["tmpfs"], out.seen["umount"]) == ("EPERM", "EPERM", "EPERM")
    _assert_nothing_written(targets)


def test_writes_outside_the_fork_fail(attack, arena, home):
    targets = _host_targets(arena, home)
    runtime = {f"/{Path(dest).parts[1]}/escaped" for _, dest in runtime_files.runtime(sys.executable)[0]}
    runtime |= {os.path.join(os.path.dirname(dest), "escaped") for _, dest in runtime_files.runtime(sys.executable)[0]}
    inside = ["/app/main.py", "/usr/escaped", "/escaped", "/proc/sys/kernel/hostname", *sorted(runtime)]
    out = attack("write_outside", {"targets": [*map(str, targets.values()), *inside]})
    assert "written" not in out.seen["writes"].values(), out.seen
    _assert_nothing_written(targets)
    assert HOSTILE.read_text().startswith('"""A hostile rollout')


def test_the_world_is_read_only_through_the_recorded_tool(attack):
    """Reading the documents straight from the fork would give an answer with no recorded turn: refused."""
    files = [f"/fork/docs/doc_{i}.txt" for i in range(8)] + [f"docs/doc_{i}.txt" for i in range(8)]
    out = attack("read_world_directly", {"files": files})
    assert out.seen["listing"] == [] and all(not r.startswith("read:") for r in out.seen["reads"].values())
    assert out.rollout.turns == []


def test_secrets_of_the_home_are_not_visible(attack, home):
    private = home / "private-0600.txt"
    private.write_text("home-secret-do-not-leak")
    private.chmod(0o600)
    password_file = home / "services" / "postgres.password"
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    files = [str(password_file), str(private), "/etc/shadow", f"/proc/{os.getpid()}/environ"]
    out = attack("read_secrets", {"files": files})
    assert all(not r.startswith("read:") for r in out.seen["reads"].values()), out.seen
    assert PostgresInfo.from_env().password not in out.rollout.answer
    private.unlink()


def test_postgres_and_ray_are_unreachable_by_tcp(attack, home):
    pg_port = PostgresInfo.from_env().port
    ray_port = int((home / "services" / "ray.address").read_text().strip().rsplit(":", 1)[1])
    out = attack("connect_tcp", {"ports": [pg_port, ray_port, 10001]})
    assert set(out.seen["connect"].values()) == {"ECONNREFUSED"}, out.seen


SOCKETS_PER_ATTACK = 6


def test_postgres_and_ray_are_unreachable_by_their_unix_sockets(attack, home):
    """Postgres has no Unix socket at all (it listens on loopback TCP only); Ray's and the daemon's (its code
    servers, the run launcher's forkserver) are hidden from the sandbox."""
    sockets = [str(p) for p in Home(home).runtime.rglob("*") if p.is_socket()]
    assert not any(".s.PGSQL" in s for s in sockets), f"Postgres listens on no Unix socket: {sockets}"
    assert any("raylet" in s for s in sockets), sockets
    seen: dict[str, str] = {}
    for i in range(0, len(sockets), SOCKETS_PER_ATTACK):  # the answer is capped: a few sockets per sandbox
        seen.update(attack("connect_unix", {"sockets": sockets[i : i + SOCKETS_PER_ATTACK]}).seen["connect"])
    assert seen.keys() == set(sockets) and set(seen.values()) == {"ENOENT"}, seen


def test_ptrace_of_a_host_process_is_refused(attack):
    victim = subprocess.Popen(["sleep", "60"])
    try:
        out = attack("ptrace", {"pid": victim.pid})
        assert out.seen["ptrace"] == "EPERM" and out.seen["ptrace_self_child"] == "EPERM"
        assert out.seen["kill"] == "ESRCH" and out.seen["proc_visible"] is False
        assert victim.poll() is None, "the host process is alive"
        assert "TracerPid:\t0" in Path(f"/proc/{victim.pid}/status").read_text()
    finally:
        victim.kill()
        victim.wait()


def test_creating_user_or_network_namespaces_is_refused(attack):
    out = attack("namespaces", {})
    assert out.seen == {
        "user": "EPERM",
        "net": "EPERM",
        "mount": "EPERM",
        "clone_newuser": "EPERM",
        "clone3_newuser": "ENOSYS",
    }


def test_a_fork_bomb_is_bounded(attack, caller):
    limits = Limits(pids=32)
    out = attack("fork_bomb", {"tries": 5000}, limits=limits)
    assert out.seen["error"] == "EAGAIN" and out.seen["forked"] < limits.pids, out.seen


def test_writing_ten_times_the_fork_quota_fills_only_the_fork(attack):
    limits = Limits(fork_bytes=8 << 20)
    free_before = os.statvfs("/tmp").f_bavail * os.statvfs("/tmp").f_frsize
    out = attack("fill_fork", {"mib": 80}, limits=limits)
    assert out.seen["error"] == "ENOSPC" and out.seen["written_mib"] <= 8, out.seen
    free_after = os.statvfs("/tmp").f_bavail * os.statvfs("/tmp").f_frsize
    assert free_before - free_after < 64 << 20, "the host's disk did not take the writes"


def test_a_gigabyte_on_stdout_is_capped_and_kills_the_trial(attack):
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = attack("print_flood", {"mib": 1024})
    assert out.rollout is None and "printed more than" in out.error, out.error
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 64 << 10, "output is never buffered"
    assert out.seconds < 20


def test_a_forged_result_line_changes_nothing(attack):
    _, secret = world_secret("w0")
    forged = Rollout(turns=[Turn(doc=0, found=True)], answer=secret, files_written=["answer.txt"])
    out = attack("forged_result", {"line": RESULT_MARKER + forged.model_dump_json()})
    assert out.rollout is not None and out.rollout.turns == [], "turns are only what the harness served"
    assert out.rollout.answer == "{}" and out.rollout != forged
    trajectory = Trajectory(
        trial_id=SPEC.trial_id, world_id="w0", world_hash="h", policy_version=0, policy_hash="p",
        turns=out.rollout.turns, answer=out.rollout.answer, files_written=out.rollout.files_written,
    )  # fmt: skip
    rubric: Rubric = BUILTIN_RUBRICS["v1"]
    assert reward_of(trajectory, simulated_judge(trajectory, rubric)).verified is False


def test_the_grader_is_not_importable(attack):
    modules = ["rl_assets.domain.scoring", "rl_assets.domain.world", "rl_assets.domain.models", "pydantic", "dagster"]
    paths = [str(Path(__file__).parents[1]), "/work", "/root/.bashrc", "/root/.cache", "/home", "/etc", "/tmp", "/run"]
    out = attack("import_grader", {"modules": modules, "paths": paths})
    assert {m: out.seen[m] for m in modules} == dict.fromkeys(modules, "ModuleNotFoundError"), out.seen
    assert out.seen["paths"] == dict.fromkeys(paths, False), out.seen
    assert out.seen["site_packages"] == []
    assert set(out.seen["root"]) <= {"app", "fork", "proc", "dev", "usr", "lib", "lib64", "root"}, out.seen["root"]


def test_sleeping_past_the_timeout_is_killed(attack):
    out = attack("sleep_forever", {}, timeout_s=2)
    assert out.rollout is None and out.error.startswith(SandboxTimeout.__name__), out.error
    assert out.seconds < 8


# -- the sandbox's own limits and mount table: no home needed ---------------------------------------


FILL_TARGETS = ["/dev/shm", "/dev", "/tmp", "/run", "/fork"]


def test_filling_dev_shm_and_every_tmpfs_stops_at_the_attempts_quota(launch):
    """bubblewrap's ``/dev`` is a tmpfs of half the host's memory, owned by the sandbox's uid: ``/dev/shm`` (and
    ``/dev`` itself) must be sized and counted against the attempt's quota, whoever launched it, since tmpfs pages
    count against no rlimit and (unprivileged) no cgroup. Every fill is held at once, then measured on the host."""
    limits = Limits(fork_bytes=8 << 20)
    out = launch("fill_tmpfs", {"targets": FILL_TARGETS, "mib": 512}, limits=limits)
    written, error = out.seen["written_mib"], out.seen["error"]
    assert error["/dev/shm"] == "ENOSPC" and written["/dev/shm"] <= 8, out.seen
    assert error["/dev"] in {"EROFS", "EACCES"} and written["/dev"] == 0, out.seen
    for absent in ("/tmp", "/run"):
        assert error[absent] == "ENOENT" or (error[absent] == "ENOSPC" and written[absent] <= 8), out.seen
    assert sum(written.values()) <= 8, f"the attempt held more than its quota: {out.seen}"
    assert out.seen["shmem_mib"] < 128, f"the host's shared memory took the writes: {out.seen}"


def test_the_mount_table_names_no_host_path(launch):
    """``/proc/mounts`` and ``mountinfo`` inside the sandbox show no path of the home, the world or the fork (the
    overlay's options, a bind mount's root), so neither the home's location nor an experiment's or trial's name."""
    out = launch("read_mounts", {"marker": MARKER})
    assert out.seen == {"/proc/mounts": [], "/proc/self/mountinfo": [], "/proc/1/mountinfo": []}, out.seen


HOLD_MEMORY = """\
import ctypes, errno, json, os

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
LIBC.shmat.argtypes, LIBC.shmat.restype = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int], ctypes.c_void_p
LIBC.shmdt.argtypes = [ctypes.c_void_p]
MIB, CREATE = 1 << 20, 0o1600  # IPC_CREAT | 0600


def name(code):
    return errno.errorcode.get(code, str(code))


def shmem_mib():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) >> 10 for line in f if line.startswith("Shmem:"))


def memfds(mib):
    held, count, errors, chunk = 0, 0, set(), b"m" * MIB
    while held < mib:
        try:
            fd = os.memfd_create("hold", 0)  # kept open: its pages are mapped by no one, so RLIMIT_AS sees none
        except OSError as err:
            errors.add(name(err.errno))
            break
        count, before = count + 1, held
        try:
            for _ in range(mib - held):
                os.write(fd, chunk)
                held += 1
        except OSError as err:  # EFBIG at RLIMIT_FSIZE: then the next memfd
            errors.add(name(err.errno))
            if held == before:
                break
    return held, count, sorted(errors)


def segments(mib, each):
    held, count, error = 0, 0, ""
    while held < mib:
        shmid = LIBC.shmget(0, each * MIB, CREATE)
        if shmid < 0:
            error = name(ctypes.get_errno())
            break
        addr = LIBC.shmat(shmid, None, 0)
        if addr is None or addr == (1 << 64) - 1:
            error = "shmat " + name(ctypes.get_errno())
            break
        ctypes.memset(addr, 1, each * MIB)
        LIBC.shmdt(ctypes.c_void_p(addr))  # detached and never IPC_RMID'd: mapped by no one, it stays
        held, count = held + each, count + 1
    return held, count, error


def main():
    with open("/app/attack.json") as f:
        params = json.load(f)["params"]
    input()
    start = shmem_mib()
    held, count, errors = memfds(params["mib"])
    seen = {"memfd_mib": held, "memfds": count, "memfd_errors": errors, "memfd_shmem_mib": shmem_mib() - start}
    held, count, error = segments(params["mib"], params["segment_mib"])
    seen.update(shm_mib=held, segments=count, shmget=error or "ok", shmem_mib=shmem_mib() - start)
    for call, args in (("msgget", (0, CREATE)), ("semget", (0, 1, CREATE))):
        seen[call] = "ok" if getattr(LIBC, call)(*args) >= 0 else name(ctypes.get_errno())
    with open("answer.txt", "w") as f:
        f.write(json.dumps(seen))


main()
"""
"""A rollout of its own (standard library only): it holds ``mib`` MiB in memfds (written, never mapped, one memfd
after another as ``RLIMIT_FSIZE`` stops each), then ``mib`` MiB in SysV segments (touched, detached, never removed),
and reports what it held and what the host's ``Shmem`` grew by, then tries a message queue and a semaphore set."""


def test_memfds_and_sysv_ipc_hold_no_memory_outside_the_attempts_limits(launch, arena):
    """A memfd's unmapped pages count against no rlimit, nor (unprivileged) any cgroup, and ``RLIMIT_FSIZE`` bounds
    only each one; a SysV segment outlives its process in the sandbox's IPC namespace, sized by no limit either (nor
    are message queues and semaphore sets). The rollout gets none of them: ENOSYS, as on a kernel without them."""
    source = arena / "hold_memory.py"
    source.write_text(HOLD_MEMORY)
    source.chmod(0o644)
    before = _host_shmem_mib()
    out = launch("hold_memory", {"mib": 1024, "segment_mib": 256}, source=source)
    seen = out.seen
    assert (seen["memfd_mib"], seen["memfd_errors"]) == (0, ["ENOSYS"]), seen
    assert (seen["shm_mib"], seen["shmget"]) == (0, "ENOSYS"), seen
    assert (seen["msgget"], seen["semget"]) == ("ENOSYS", "ENOSYS"), seen
    assert seen["shmem_mib"] < 64, f"the host's shared memory took the writes: {seen}"
    freeing = Waiting(timeout_s=5, interval_s=0.05).deadline()  # an IPC namespace is freed after its last process
    while (held := _host_shmem_mib() - before) >= 64 and not freeing.expired():
        freeing.sleep()
    assert held < 64, f"the attempt's shared memory is freed with it: {held} MiB still held"


def _host_shmem_mib() -> int:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    return next(int(line.split()[1]) >> 10 for line in meminfo if line.startswith("Shmem:"))
