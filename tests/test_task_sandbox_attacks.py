"""The task sandbox's own limits and mount table, attacked from an agent's command, launched as root and as nobody.

Each case runs a whole attempt (a world, an overlay fork, a :class:`~rl_assets.sandbox.task_shell.TaskShell`) in
a child process: as root (the sandbox then runs as a fresh unprivileged host uid, inside an attempt cgroup) and
as ``nobody`` (no cgroup: the sandbox's sizes and rlimits hold alone). The commands are the hostile rollout's own
attacks (``tests/hostile/attacks.py``, copied into the world and run by the task's ``python3``). The home and the
fork are under paths holding :data:`MARKER`, so a host path showing through the sandbox's mount table is found by
name. No home is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from rl_assets.sandbox.launcher import isolation

HOSTILE = Path(__file__).parent / "hostile" / "attacks.py"
UNPRIVILEGED_PYTHON = "/usr/bin/python3.11"
"""The unprivileged caller's interpreter: root's pyenv under /root is not reachable by nobody."""
MARKER = "SECRETHOMEMARKER"
QUOTA_MIB = 8
FILL_TARGETS = ["/dev/shm", "/dev", "/tmp", "/run", "/app"]

ATTEMPT = """
import json, shlex, shutil, subprocess, sys, tempfile
from pathlib import Path
from rl_assets.sandbox.limits import Limits
from rl_assets.sandbox.task_shell import TaskShell
from rl_assets.worlds.local import LocalWorlds

marker, quota_mib, hostile, attacks = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
root = Path(tempfile.mkdtemp(prefix=f"rl-assets-{marker}-home-", dir="/tmp"))
try:
    worlds = LocalWorlds(root / "worlds", root / "forks")
    world = worlds.world_dir("w")
    world.mkdir(parents=True)
    (world / "attacks.py").write_text(Path(hostile).read_text())
    worlds.reseal("w")
    seen = {}
    with worlds.fork("w", f"experiment-{marker}-trial", "a0", overlay=True) as fork:
        with TaskShell(fork, limits=Limits(fork_bytes=quota_mib << 20)) as shell:
            for name, attack in attacks.items():
                command = f"echo {shlex.quote(json.dumps(attack))} > /tmp/attack.json && "
                command += "python3 attacks.py /tmp/attack.json && cat answer.txt"
                if name.startswith("phase"):
                    seen[name] = shell.run_phase(command, 120, mounts={}, env={}).output
                else:
                    seen[name] = shell.run(command, 120).output
            seen["tables"] = shell.run("cat /proc/mounts; echo; cat /proc/self/mountinfo", 10).output
finally:
    subprocess.run(["chmod", "-R", "u+w", str(root)], check=False)  # the sealed world is read-only
    shutil.rmtree(root)
print(json.dumps(seen))
"""


@pytest.fixture(params=["root", "nobody"])
def caller(request) -> str:
    if os.geteuid() != 0:
        pytest.fail("the matrix launches as root and as nobody: run it as root")
    if isolation().name != "bwrap":
        pytest.fail(f"isolation {isolation().name!r}: no user namespaces for the task sandbox on this machine")
    return request.param


def _attempt(caller: str, attacks: dict[str, dict]) -> dict[str, str]:
    """Run ``attacks`` (``{name: {"name": attack, "params": ...}}``; a name starting ``phase`` runs as a trusted
    phase) as an agent's commands in one attempt launched by ``caller``; what each printed, and the mount tables."""
    repo = Path(__file__).parents[1]
    args = [ATTEMPT, MARKER, str(QUOTA_MIB), str(HOSTILE), json.dumps(attacks)]
    if caller == "root":
        argv = [sys.executable, "-c", *args]
        env = {**os.environ, "PYTHONPATH": str(repo)}
    else:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", UNPRIVILEGED_PYTHON, "-c", *args]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{repo}:{sysconfig.get_paths()['purelib']}"}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _seen(output: str) -> dict:
    try:
        return json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError(f"the attack's command failed: {output[-2000:]}") from None


def test_filling_dev_shm_and_every_tmpfs_stops_at_the_attempts_quota(caller):
    """An agent's ``/dev/shm`` shares the fork's quota, ``/dev`` is read-only, ``/tmp`` is sized; a trusted phase
    gets a fresh ``/tmp`` and ``/dev/shm`` of that size. So an agent's command holds at most two sizes of the host's
    memory and a phase three, whoever launched the attempt (tmpfs pages count against no rlimit, nor any cgroup
    when unprivileged)."""
    fill = {"name": "fill_tmpfs", "params": {"targets": FILL_TARGETS, "mib": 512}}
    outputs = _attempt(caller, {"agent": fill, "phase": fill})
    for name, sizes in (("agent", 2), ("phase", 3)):
        seen = _seen(outputs[name])
        written, error = seen["written_mib"], seen["error"]
        assert error["/dev/shm"] == "ENOSPC" and written["/dev/shm"] <= QUOTA_MIB, (name, seen)
        assert error["/dev"] in {"EROFS", "EACCES"} and written["/dev"] == 0, (name, seen)
        assert error["/tmp"] == "ENOSPC" and written["/tmp"] <= QUOTA_MIB, (name, seen)
        assert error["/run"] == "ENOENT" or (error["/run"] == "ENOSPC" and written["/run"] <= QUOTA_MIB), (name, seen)
        assert sum(written.values()) <= sizes * QUOTA_MIB, f"{name} held more than its sizes: {seen}"
        assert seen["shmem_mib"] < 128, f"the host's shared memory took {name}'s writes: {seen}"


def test_the_mount_table_names_no_host_path(caller):
    """An agent's command sees no path of the home, the world or the fork in ``/proc/mounts`` or ``mountinfo``."""
    tables = _attempt(caller, {})["tables"]
    assert " /proc proc " in tables and " - overlay rl-assets-fork " in tables, tables[-2000:]
    leaks = [line for line in tables.splitlines() if MARKER in line]
    assert leaks == [], "\n".join(leaks)
