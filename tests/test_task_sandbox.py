"""The task sandbox through the real bubblewrap: what a Harbor task's commands can do, and attacks that must fail.

Every command here runs in the real :class:`~rl_assets.sandbox.task_shell.TaskShell` on a real overlay
fork of a sealed world (:class:`~rl_assets.worlds.local.LocalWorlds`), launched as root (tests run as root:
the sandbox then runs as a fresh unprivileged host uid, inside an attempt cgroup). An attack's check is
made from outside: the host file, socket or listener it aimed at is untouched, and after ``close()`` no
process, mount or cgroup of the attempt is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rl_assets.sandbox import task_shell
from rl_assets.sandbox.launcher import Isolation, isolation
from rl_assets.sandbox.limits import CGROUP_ROOT, PREFIX, Limits
from rl_assets.sandbox.protocol import ForkLayout
from rl_assets.sandbox.task_shell import OUTPUT_BYTES, TaskSandboxUnavailable, TaskShell
from rl_assets.worlds.local import LocalWorlds, tree_hash

UNPRIVILEGED_PYTHON = "/usr/bin/python3.11"
"""The unprivileged caller's interpreter: root's pyenv under /root is not reachable by nobody."""
WORLD = {"README.txt": "the task's files\n", "src/app.py": "print('v1')\n"}
SECRET = "rl-assets-planted-secret"


@pytest.fixture(autouse=True)
def _sandboxed() -> None:
    if isolation().name != "bwrap":
        pytest.fail(f"isolation {isolation().name!r}: no user namespaces for the task sandbox on this machine")


@pytest.fixture
def worlds(tmp_path: Path) -> LocalWorlds:
    """A sealed (read-only) world ``w`` of plain files, as a task world would be."""
    worlds = LocalWorlds(tmp_path / "worlds", tmp_path / "forks")
    for rel, text in WORLD.items():
        (worlds.world_dir("w") / rel).parent.mkdir(parents=True, exist_ok=True)
        (worlds.world_dir("w") / rel).write_text(text)
    worlds.reseal("w")
    return worlds


@pytest.fixture
def fork(worlds: LocalWorlds) -> Iterator[ForkLayout]:
    with worlds.fork("w", "trial", "a0", overlay=True) as layout:
        yield layout


@pytest.fixture
def shell(fork: ForkLayout) -> Iterator[TaskShell]:
    with TaskShell(fork, env={"TASK_VAR": "set by the task"}) as sh:
        yield sh
        assert_only_the_keeper_is_left(sh)
    assert_nothing_left(sh)


def attempt_cgroups() -> set[Path]:
    return {p for c in ("pids", "memory", "cpu", "unified") for p in (CGROUP_ROOT / c).glob(f"{PREFIX}{os.getpid()}-*")}


def descendants(pid: int) -> set[int]:
    children: dict[int, set[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, set()).add(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


def assert_only_the_keeper_is_left(sh: TaskShell) -> None:
    """Between commands the attempt is its keeper alone: in its cgroup, and in its process tree."""
    assert sh.cgroup is not None and sh.cgroup.pids() == {sh.keeper_pid}
    assert descendants(sh.keeper_pid) == set()


def assert_nothing_left(sh: TaskShell) -> None:
    assert not Path(f"/proc/{sh.keeper_pid}").exists(), "the keeper is gone"
    assert not any("rl-assets-fork" in line or "rl-assets-tmp" in line for line in Path("/proc/self/mountinfo").open())
    assert attempt_cgroups() == set(), "the attempt's cgroups are removed"
    assert not sh.base.exists(), "the attempt's directories are removed"


# -- what a task's commands can do -----------------------------------------------------------------


def test_bash_python3_and_coreutils_run_in_the_working_directory_as_an_unprivileged_user(shell):
    result = shell.run(
        "pwd; id -u; ls; sort src/app.py README.txt | wc -l; python3 -c 'import json, sys; print(sys.version_info[0])'",
        10,
    )
    assert result.exit_code == 0 and not result.timed_out and not result.truncated, result.output
    assert result.output.split() == ["/app", "1000", "README.txt", "src", "2", "3"]
    env = shell.run("env | sort", 10).output.splitlines()
    assert [line.split("=", 1)[0] for line in env if not line.startswith(("PWD=", "SHLVL=", "_="))] == [
        "HOME",
        "LANG",
        "PATH",
        "TASK_VAR",
    ]
    caps = shell.run("grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status", 10).output
    assert "CapEff:\t0000000000000000" in caps and "Seccomp:\t2" in caps and "NoNewPrivs:\t1" in caps


def test_writes_persist_between_commands_and_never_reach_the_sealed_world(worlds, fork):
    before = tree_hash(worlds.world_dir("w"))
    with TaskShell(fork) as shell:
        assert shell.run("echo v2 > src/app.py && mkdir -p out && echo made > out/new.txt", 10).exit_code == 0
        assert shell.run("echo kept > /tmp/scratch", 10).exit_code == 0
        result = shell.run("cat src/app.py out/new.txt /tmp/scratch", 10)
        assert result.output == "v2\nmade\nkept\n"
    assert tree_hash(worlds.world_dir("w")) == before
    assert worlds.verified_hash("w") == before


def test_the_working_directory_is_the_tasks(fork):
    with TaskShell(fork, workdir="/srv/project") as shell:
        assert shell.run("pwd; ls", 10).output.split() == ["/srv/project", "README.txt", "src"]
    for bad in ("relative", "/", "/usr/src", "/tmp/x", "/tests", "/a/../usr"):
        with pytest.raises(ValueError, match="workdir"):
            TaskShell(fork, workdir=bad)


def test_background_processes_are_killed_when_the_command_returns(shell):
    start = time.monotonic()
    result = shell.run("sleep 1000 & (setsid sleep 1000 &) ; nohup sleep 1000 >/dev/null 2>&1 & echo started", 10)
    assert result.output == "started\n" and time.monotonic() - start < 5
    assert_only_the_keeper_is_left(shell)
    assert "sleep" not in shell.run("ps -eo comm", 10).output


def test_a_command_is_killed_at_its_timeout_and_the_attempt_goes_on(shell):
    result = shell.run("echo before; sleep 30; echo after", 0.5)
    assert result.timed_out and result.exit_code is None and result.output == "before\n"
    assert 0.5 <= result.seconds < 5
    assert_only_the_keeper_is_left(shell)
    assert shell.run("echo alive", 10).output == "alive\n"


def test_output_is_capped_keeping_the_head_and_the_tail(shell):
    result = shell.run("echo BEGIN; head -c 1000000 /dev/zero | tr '\\0' x; echo; echo END >&2", 10)
    assert result.exit_code == 0 and result.truncated
    assert result.output.startswith("BEGIN\nxxx") and result.output.endswith("xxx\nEND\n")
    assert "bytes of output cut" in result.output and len(result.output) < OUTPUT_BYTES + 100
    small = shell.run("echo out; echo err >&2", 10)
    assert small.output == "out\nerr\n" and not small.truncated


def test_without_user_namespaces_a_task_is_refused_not_run_unsandboxed(fork, monkeypatch):
    monkeypatch.setattr(
        task_shell, "isolation", lambda: Isolation("none", overlay=False, prefix=(), bwrap="bwrap: no user namespaces")
    )
    with pytest.raises(TaskSandboxUnavailable, match="never unsandboxed"):
        TaskShell(fork)
    assert not (Path(fork.upper).parent / "task-sandbox").exists()


# -- attacks that must fail ------------------------------------------------------------------------


@pytest.fixture
def planted_home(tmp_path: Path) -> Iterator[Path]:
    """A home outside the fork: a secret file and a listening Postgres-style unix socket."""
    home = tmp_path / "home"
    (home / "runtime").mkdir(parents=True)
    (home / "secret.txt").write_text(SECRET)
    (home / "secret.txt").chmod(0o644)
    home.chmod(0o755)
    with socket.socket(socket.AF_UNIX) as pg:
        pg.bind(str(home / "runtime" / ".s.PGSQL.5432"))
        pg.listen()
        pg.setblocking(False)
        yield home
        with pytest.raises(BlockingIOError):
            pg.accept()  # nothing reached the socket


def test_the_home_work_root_and_our_venv_are_not_there(shell, planted_home):
    venv = Path(sys.prefix)
    for path in (planted_home / "secret.txt", planted_home, venv / "pyvenv.cfg", "/work", "/root", "/home", "/var"):
        result = shell.run(f"cat {path} || ls -a {path}", 10)
        assert result.exit_code != 0 and SECRET not in result.output, (path, result.output)
    found = shell.run(
        "find / \\( -path /proc -o -path /sys -o -path /usr \\) -prune -o -name secret.txt -print 2>/dev/null;"
        f"grep -rl {SECRET} /app /tmp /etc /bin/ 2>/dev/null",
        30,
    )
    assert found.output == ""
    assert shell.run("python3 -c 'import pydantic'", 10).exit_code != 0, "our venv's site-packages are not there"
    assert "postgresql" not in shell.run("ls /etc", 10).output, "the host's service configs are not there"


def test_the_postgres_unix_socket_is_unreachable(shell, planted_home):
    path = planted_home / "runtime" / ".s.PGSQL.5432"
    code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(path)!r})"
    assert shell.run(f'python3 -c "{code}"', 10).exit_code != 0


def test_no_network_a_loopback_listener_and_an_abstract_socket_are_unreachable(shell):
    with socket.socket() as listener, socket.socket(socket.AF_UNIX) as abstract:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        abstract.bind(f"\0rl-assets-test-{os.getpid()}")
        abstract.listen()
        abstract.setblocking(False)
        port = listener.getsockname()[1]
        tcp = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
        unix = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0rl-assets-test-{os.getpid()}')"
        assert shell.run(f'python3 -c "{tcp}"', 10).exit_code != 0
        assert shell.run(f"echo hi > /dev/tcp/127.0.0.1/{port}", 10).exit_code != 0
        assert shell.run(f'python3 -c "{unix}"', 10).exit_code != 0
        assert shell.run("cat /sys/class/net/*/address; ls /sys", 10).exit_code != 0
        for sock in (listener, abstract):
            with pytest.raises(BlockingIOError):
                sock.accept()


def test_writes_outside_the_working_directory_fail_and_the_world_is_unchanged(worlds, fork):
    before = tree_hash(worlds.world_dir("w"))
    with TaskShell(fork) as shell:
        for target in ("/usr/bin/evil", "/etc/passwd", "/bin/sh", "/evil", "/proc/sys/kernel/hostname"):
            result = shell.run(f"echo owned > {target}", 10)
            assert result.exit_code != 0, (target, result.output)
        assert shell.run(f"echo owned > {worlds.world_dir('w')}/README.txt", 10).exit_code != 0
        assert shell.run("unshare -r true || unshare -n true", 10).exit_code != 0, "no new namespaces"
        assert shell.run("mount -t tmpfs none /app", 10).exit_code != 0, "no mounts"
    assert tree_hash(worlds.world_dir("w")) == before
    assert "owned" not in Path("/etc/passwd").read_text()


def test_a_fork_bomb_is_bounded_and_killed(fork):
    with TaskShell(fork, limits=Limits(pids=32)) as shell:
        result = shell.run("bomb() { bomb | bomb & bomb; }; bomb", 2)
        assert "fork: retry: Resource temporarily unavailable" in result.output, "the process limit held"
        assert_only_the_keeper_is_left(shell)
        assert shell.run("echo alive", 10).output == "alive\n"


def test_a_memory_hog_is_bounded(fork):
    with TaskShell(fork, limits=Limits(memory_bytes=64 << 20)) as shell:
        result = shell.run("python3 -c \"b = b'x' * (512 << 20); print('got')\"", 20)
        assert result.exit_code != 0 and "got" not in result.output
        assert shell.run("echo alive", 10).output == "alive\n"


def test_filling_the_fork_fills_only_its_quota(fork):
    with TaskShell(fork, limits=Limits(fork_bytes=8 << 20)) as shell:
        result = shell.run("head -c 80000000 /dev/zero > big; echo $?", 20)
        assert result.output.strip() != "0", "the write failed at the quota"
        assert shell.run("du -sm big | cut -f1", 10).output.strip() in {"7", "8"}
    assert list(Path(fork.upper).iterdir()) == [], "nothing reached the host's disk"


UNPRIVILEGED = """
import json, os, tempfile
from pathlib import Path
from rl_assets.sandbox.protocol import ForkLayout
from rl_assets.sandbox.task_shell import TaskShell
from rl_assets.sandbox.task_trial import run_oracle
from rl_assets.tasks.task import load_task

seen = {"oracle": run_oracle(load_task(Path(%(task)r))).reward}
with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as scratch:
    root = Path(scratch)
    (root / "world").mkdir()
    (root / "world" / "given.txt").write_text("given\\n")
    (root / "world" / "given.txt").chmod(0o444)
    for d in ("upper", "work", "merged"):
        (root / d).mkdir()
    fork = ForkLayout(kind="overlay", lower=str(root / "world"), upper=str(root / "upper"),
                      work=str(root / "work"), merged=str(root / "merged"))
    with TaskShell(fork) as shell:
        seen["id"] = shell.run("id -un; id -u", 10).output
        seen["edit"] = shell.run("echo edited >> given.txt && cat given.txt", 10).output
        seen["outside"] = shell.run(f"ls {root}", 10).exit_code
        seen["background"] = shell.run("sleep 1000 & echo started", 10).output
        seen["left"] = os.popen(f"ps --ppid {shell.keeper_pid} -o pid=").read()
    seen["world"] = (root / "world" / "given.txt").read_text()
print(json.dumps(seen))
"""


def test_an_unprivileged_caller_gets_the_same_sandbox(tmp_path):
    """Launched by ``nobody`` (no cgroup, the caller's own uid mapped): the oracle passes, and the boundary holds."""
    script = UNPRIVILEGED % {"task": str(Path(__file__).parent.parent / "examples" / "tasks" / "create-file")}
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{Path(__file__).parent.parent}:{sysconfig.get_paths()['purelib']}"}
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", UNPRIVILEGED_PYTHON, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "oracle": 1.0,
        "id": "agent\n1000\n",
        "edit": "given\nedited\n",
        "outside": 2,
        "background": "started\n",
        "left": "",
        "world": "given\n",
    }


ORPHANED = """
import subprocess, sys
from pathlib import Path
from rl_assets.sandbox.task_shell import TaskShell
from rl_assets.worlds.local import LocalWorlds
worlds = LocalWorlds(Path(sys.argv[1]) / "worlds", Path(sys.argv[1]) / "forks")
worlds.world_dir("w").mkdir(parents=True)
(worlds.world_dir("w") / "f.txt").write_text("x")
worlds.reseal("w")
with worlds.fork("w", "trial", "a0", overlay=True) as layout:
    shell = TaskShell(layout)
    # a process that outlives this one holding the keeper's stdin open: its end of file never comes
    holder = subprocess.Popen(["sleep", "600"], pass_fds=(shell.proc.stdin.fileno(),), start_new_session=True)
    print(shell.keeper_pid, holder.pid, flush=True)
    sys.stdin.read()  # until killed
"""


def test_the_keeper_dies_with_the_process_that_launched_it(tmp_path):
    """The keeper is forked by the launcher's zygote, which exits with the launcher and takes its keepers with it
    (their parent-death signal): a SIGKILLed launcher leaves no keeper holding the fork's mounts, even while
    another process holds its stdin open (so it never reads the end of its commands)."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", ORPHANED, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    keeper_pid, holder = map(int, launcher.stdout.readline().split())
    pidfd = os.pidfd_open(keeper_pid)
    try:
        launcher.kill()
        launcher.wait()
        ended = select.poll()
        ended.register(pidfd, select.POLLIN)
        assert ended.poll(30_000), "the keeper outlived its launcher"
    finally:
        os.close(pidfd)
        os.kill(holder, signal.SIGKILL)
