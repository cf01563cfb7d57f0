"""Harbor's own tasks, exactly as its cookbook ships them (``tests/fixtures/harbor-cookbook``, see ``SOURCE``):
what ``tasks check`` and a short ``train`` make of them, in real containers (:mod:`container_kit`).

Their Dockerfiles say ``FROM ubuntu:24.04``; no registry is reachable here, so where the runtime has no image of
that name the test gives the local Debian base that name (the only change, and not to the tasks' files).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from container_kit import runtime_with_base, task_containers

from rl_assets_testkit.example_solutions import POLICY_MODEL, call
from rl_assets_testkit.expectations import train_json
from rl_assets_testkit.served_model import ServedModel

COOKBOOK = Path(__file__).parent / "fixtures" / "harbor-cookbook"
MULTI_STEP = "harbor/hello-multi-step-full"


@pytest.fixture(scope="module")
def runtime():
    return runtime_with_base("docker.io/library/ubuntu:24.04")


def test_tasks_check_runs_every_single_container_cookbook_task_and_says_why_each_falls_short(runtime):
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", "tasks", "check", str(COOKBOOK)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    lines = proc.stdout.splitlines()
    rewards = {line.split()[0]: line.split()[5] for line in lines[1:8]}
    assert proc.returncode == 1, "a solution short of reward 1 is a failed check"
    # The compose tasks' sidecars start from images no registry here serves (python:3.12-slim, ghcr.io's uv) unless
    # the machine has stand-ins of those names: their builds fail, or (with sidecars up) the verifier lacks astral.sh.
    assert rewards.pop("multi-container") in ("error", "0.0"), proc.stdout
    assert rewards == {
        "dns-blacklisting": "0.0",
        "mcp-tools": "error",
        "multi-reward": "error",
        MULTI_STEP: "1.0",  # three steps, each verified by its own test.sh, needing no network
        "simple-task": "0.0",
        "skills": "0.0",
    }, proc.stdout
    out = proc.stdout + proc.stderr  # the table and refusals, then each oracle's failure with its output's tail
    for offline in ("dns-blacklisting", "simple-task", "skills"):  # their test.sh installs uv from astral.sh
        assert f"{offline}: oracle reward 0.0, not 1 (solve.sh: exit 0)\n    its container had no network" in out
    assert "multi-reward: oracle: RewardKeyMissing: /logs/verifier/reward.json: no 'reward' key (it has " in out
    assert "'correctness', 'performance'): training needs one number" in out
    # mcp-tools' sidecar needs ghcr.io's uv to build and PyPI at start (uv run): no build, or never healthy.
    (mcp,) = [line for line in out.splitlines() if line.startswith("mcp-tools: oracle: ")]
    assert "building mcp-tools's mcp-server's image failed" in mcp or "'mcp-server' never became healthy" in mcp
    assert "refused" not in proc.stdout, "every task runs here, compose ones with their sidecars"
    assert lines[-1] == "7 valid, 0 invalid task(s); oracle: 1 of 7 solution(s) reach reward 1"
    assert task_containers(runtime) == []


GREET = "cat > /app/greet.sh <<'EOF'\n#!/bin/bash\n{body}\nEOF\nchmod +x /app/greet.sh"
README = "# greet.sh\n\nReads a name from `config.txt` and greets it.\n\n```bash\n/app/greet.sh\n```\n"


def _multi_step_answers(scaffold_prints: str) -> list[dict]:
    """A model working through the three steps of one dialogue: two turns a step (a command, then done)."""
    return [
        {
            "match": "Create an executable bash script at `/app/greet.sh`",  # step 1's instruction
            "turns": [
                call("bash", command=GREET.format(body=f'echo "{scaffold_prints}"')),
                {"content": "scaffolded."},
                call("bash", command=GREET.format(body='echo "Hello, $(tr -d "\\n" < /app/config.txt)!"')),
                {"content": "implemented."},
                call("write_file", path="/app/README.md", content=README),
                {"content": "documented."},
            ],
        }
    ]


def _train(home: Path, tmp_path: Path, name: str, scaffold_prints: str) -> dict:
    with ServedModel({"tasks": _multi_step_answers(scaffold_prints), "judge": []}, tmp_path) as server:
        return train_json(
            home,
            *("--experiment", name, "--tasks", str(COOKBOOK / "multi-step"), "--policy-url", server.base_url),
            *("--policy-model", POLICY_MODEL, "--steps", "1", "--samples", "1", "--max-turns", "3"),
        )


def test_the_multi_step_cookbook_task_trains_step_by_step_and_stops_at_a_missed_min_reward(
    runtime, home, stores, tmp_path
):
    (solved,) = _train(home, tmp_path, "cookbook-steps", "hello")["trials"]
    assert solved["reward"] == solved["verifier_reward"] == 1.0
    assert [(s["name"], s["rewards"]) for s in solved["steps"]] == [
        ("scaffold", {"reward": 1.0}),
        ("implement", {"reward": 1.0}),
        ("document", {"reward": 1.0}),
    ]
    trajectory = stores.trials.trajectory("cookbook-steps", 0, solved["trial_id"].split("-", 1)[1])
    asked = [m.content for m in trajectory.transcript.messages if m.role == "user"]
    assert len(asked) == 3 and asked[1].startswith("A file `/app/config.txt` has been placed"), "one dialogue"
    assert [m.role for m in trajectory.transcript.messages].count("system") == 1

    # Step 1's min_reward is 1.0: a greet.sh printing the wrong word ends the trial after it, unrewarded.
    (stopped,) = _train(home, tmp_path, "cookbook-steps-missed", "hi")["trials"]
    assert stopped["reward"] == 0.0
    assert [(s["name"], s["rewards"]) for s in stopped["steps"]] == [("scaffold", {"reward": 0.0})]
    assert task_containers(runtime) == []
