"""A trial's sandbox: private forks, no network, nothing outside its fork, no secrets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.kubernetes.pod_specs import JUDGE_KEY_ENV
from rl_assets.sandbox.launcher import SandboxTimeout, isolation, run_sandbox, sandbox_env
from rl_assets.sandbox.protocol import SandboxFault, SandboxRequest
from rl_assets.sandbox.runner import ForkTools, _confine_writes
from rl_assets.worlds import LocalWorlds, WorldTamperedError, tree_hash

SPEC = ExperimentConfig(name="iso").trials(0)[0]


@pytest.fixture
def worlds(tmp_path: Path) -> LocalWorlds:
    tmp_path.chmod(0o755)
    store = LocalWorlds(tmp_path / "worlds", tmp_path / "forks")
    store.ensure_built("w0")
    return store


@pytest.mark.parametrize("overlay", [True, False], ids=["overlay", "copy"])
def test_trial_writes_never_reach_the_world_or_another_fork(worlds, overlay):
    if overlay and not isolation().overlay:
        pytest.fail("this machine cannot mount overlays in a sandbox; the overlay path is untested here")
    before = tree_hash(worlds.world_dir("w0"))
    with worlds.fork("w0", "ta", "a", overlay) as fork_a, worlds.fork("w0", "tb", "b", overlay) as fork_b:
        rollout = run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork_a), timeout_s=30)
        assert "answer.txt" in rollout.files_written
        written = Path(fork_a.upper if overlay else fork_a.merged) / "answer.txt"
        assert written.exists(), "the agent's output lands in its own fork"
        assert not (Path(fork_b.merged) / "answer.txt").exists()
        assert not (Path(fork_b.upper) / "answer.txt").exists()
    assert tree_hash(worlds.world_dir("w0")) == before
    assert not (worlds.world_dir("w0") / "answer.txt").exists()
    assert list(worlds.forks_root.iterdir()) == [], "forks are removed after the attempt"


def test_tools_refuse_paths_outside_the_fork(tmp_path):
    tools = ForkTools(tmp_path, latency_s=0)
    with pytest.raises(PermissionError):
        tools.write("../escape.txt", "x")
    with pytest.raises(PermissionError):
        tools.read("/etc/hostname")
    assert not (tmp_path.parent / "escape.txt").exists()


# Runs inside the sandbox as the runner does (same isolation, environment and write confinement), then tries
# what a hostile agent would: the network, every other process's environment, writes outside its fork.
HOSTILE_AGENT = """
import glob, json, os, socket, sys
from rl_assets.sandbox.protocol import SandboxRequest
from rl_assets.sandbox.runner import _confine_writes
request = SandboxRequest.model_validate_json(sys.stdin.read())
if request.fork.kind == "overlay":
    from rl_assets.sandbox.runner import _mount_overlay
    _mount_overlay(request)
_confine_writes(request)
s = socket.socket(); s.settimeout(1)
environs = ""
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        environs += open(path, "rb").read().decode(errors="replace")
    except OSError:
        pass
writes = {}
for target in json.loads(sys.argv[1]):
    try:
        with open(target, "w") as f:
            f.write("escaped")
        writes[target] = "written"
    except OSError as err:
        writes[target] = err.strerror
print(json.dumps({
    "connect": s.connect_ex(("1.1.1.1", 80)),
    "ifaces": sorted(n for _, n in socket.if_nameindex()),
    "env": dict(os.environ),
    "other_environs": environs,
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "writes": writes,
}))
"""


@pytest.mark.parametrize("overlay", [True, False], ids=["overlay", "copy"])
def test_a_hostile_rollout_gets_no_network_no_secrets_and_no_writes_outside_its_fork(
    worlds, overlay, tmp_path, monkeypatch
):
    iso = isolation()
    if not (iso.network_isolated and iso.confines_writes):
        pytest.fail(f"isolation {iso.name!r} gives no network, mount and pid namespaces on this machine")
    if overlay and not iso.overlay:
        pytest.fail("this machine cannot mount overlays in a sandbox; the overlay path is untested here")
    monkeypatch.setenv(JUDGE_KEY_ENV, "sk-judge-do-not-leak")  # as a judging step's process would hold it
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "pg-do-not-leak")
    with worlds.fork("w0", "hostile", "a", overlay) as fork:
        merged = Path(fork.merged)
        targets = {
            "fork": str(merged / "answer.txt"),
            "world": str(worlds.world_dir("w0") / "docs" / "escaped.txt"),
            "home": str(tmp_path / "escaped.txt"),
            "tmp": "/tmp/rl-assets-escaped.txt",
            "upper": str(Path(fork.upper) / "escaped.txt") if overlay else str(merged.parent / "escaped.txt"),
        }
        request = SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork, confine_writes=True)
        proc = subprocess.run(
            [*iso.prefix, sys.executable, "-c", HOSTILE_AGENT, json.dumps(list(targets.values()))],
            input=request.model_dump_json(),
            capture_output=True,
            text=True,
            env=sandbox_env(),
            cwd="/",
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen = json.loads(proc.stdout)
        wrote_in_fork = (Path(fork.upper if overlay else fork.merged) / "answer.txt").exists()

    assert seen["connect"] != 0 and seen["ifaces"] == ["lo"], "no network but loopback"
    assert set(seen["env"]) <= {"PATH", "PYTHONPATH", "PWD", "LC_CTYPE"}, seen["env"]
    assert "do-not-leak" not in seen["other_environs"], "no other process's environment is readable"
    assert max(seen["pids"]) < 10, f"only the sandbox's own processes are visible: {seen['pids']}"
    writes = dict(zip(targets, seen["writes"].values(), strict=True))
    assert writes["fork"] == "written" and wrote_in_fork
    assert {k: v for k, v in writes.items() if k != "fork"} == {
        k: "Read-only file system" for k in targets if k != "fork"
    }
    assert not Path(targets["world"]).exists() and not Path(targets["home"]).exists()
    assert not Path(targets["tmp"]).exists()


def test_the_runner_refuses_to_confine_writes_outside_a_sandbox(worlds):
    """Confinement remounts every mount read-only: outside its own namespaces it would hit the host's."""
    with worlds.fork("w0", "t", "outside", overlay=False) as fork:
        request = SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork, confine_writes=True)
        with pytest.raises(RuntimeError, match="refusing to confine writes"):
            _confine_writes(request)


def test_injected_fault_and_hang_are_reported_and_killed(worlds):
    with worlds.fork("w0", "t", "f", isolation().overlay) as fork:
        with pytest.raises(SandboxFault, match="injected sandbox fault"):
            run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork, fail_below=1.0), timeout_s=30)
    with worlds.fork("w0", "t", "h", isolation().overlay) as fork:
        with pytest.raises(SandboxTimeout):
            run_sandbox(SandboxRequest(spec=SPEC, prior=[1.0] * 8, fork=fork, hang=True), timeout_s=1.5)
    leftover = subprocess.run(["pgrep", "-f", "rl_assets.sandbox.runner"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "a timed-out sandbox leaves no process behind"


def test_world_modified_behind_the_systems_back_is_detected(worlds):
    doc = worlds.world_dir("w0") / "docs" / "doc_0.txt"
    doc.chmod(0o644)
    doc.write_text("tampered\n")
    with pytest.raises(WorldTamperedError, match="modified after it was sealed"):
        worlds.verified_hash("w0")
