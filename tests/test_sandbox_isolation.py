"""A trial's sandbox: private forks, no network, nothing outside its fork, no secrets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.sandbox.launcher import SandboxTimeout, isolation, run_sandbox
from rl_assets.sandbox.protocol import SandboxFault, SandboxRequest
from rl_assets.sandbox.runner import ForkTools
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


def test_sandbox_has_no_network_and_no_parent_environment():
    if not isolation().network_isolated:
        pytest.fail(f"isolation {isolation().name!r} gives no network namespace on this machine")
    os.environ["RL_ASSETS_TEST_SECRET"] = "sk-do-not-leak"
    probe = (
        "import os, socket, json;"
        "s = socket.socket(); s.settimeout(1);"
        "err = s.connect_ex(('1.1.1.1', 80));"
        "print(json.dumps({'err': err, 'ifaces': sorted(n for _, n in socket.if_nameindex()),"
        " 'secret': os.environ.get('RL_ASSETS_TEST_SECRET')}))"
    )
    out = subprocess.run(
        [*isolation().prefix, sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        check=True,
    ).stdout
    import json

    seen = json.loads(out)
    assert seen["err"] != 0, "a connection out of the sandbox must fail"
    assert seen["ifaces"] == ["lo"]
    assert seen["secret"] is None


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
