"""Task environments as images (issue 27): built once by their context's hash, one container per attempt,
the agent's commands and the verifier in it through the runtime's exec, nothing left behind.

Real Podman (or Docker) and real images (:mod:`container_kit`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from pathlib import Path

import dagster as dg
import pytest
from container_kit import BASE, runtime_with_base, task_containers

from rl_assets.containers.images import context_hash, ensure_image, image_tag
from rl_assets.containers.sessions import WORKER_LABEL, container_session, reap
from rl_assets.containers.sidecars import labelled_networks
from rl_assets.tasks.task import load_task
from rl_assets_testkit.example_solutions import JUDGE_MODEL, POLICY_MODEL, script
from rl_assets_testkit.expectations import run_cli, train_json
from rl_assets_testkit.kills import Train, Watch, kill_train_tree, run_train, wait_for
from rl_assets_testkit.served_model import ServedModel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "container-tasks"


@pytest.fixture(scope="module")
def runtime():
    return runtime_with_base()


def _task(tmp_path: Path, test_sh: str, solve: str = "true", toml: str = "") -> Path:
    """A Dockerfile task on the base image, in the world-traversable temp folder."""
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / "task"
    for d in ("environment", "tests", "solution"):
        (root / d).mkdir(parents=True)
    (root / "task.toml").write_text(f"[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n{toml}")
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text(f"FROM {BASE}\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text(textwrap.dedent(test_sh))
    (root / "solution" / "solve.sh").write_text(solve)
    return root


def test_the_example_container_tasks_pass_tasks_check_and_leave_no_container(runtime):
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", "tasks", "check", str(EXAMPLES)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:5]]
    assert [(r[0], r[2], r[5]) for r in rows] == [
        (f"rl-assets/{name}", kind, "1.0")
        for name, kind in [
            ("configure-service", "dockerfile"),
            ("fix-package", "dockerfile"),
            ("query-service", "compose"),
            ("summarize-json", "dockerfile"),
        ]
    ]
    assert proc.stdout.splitlines()[-1] == "4 valid, 0 invalid task(s); oracle: 4 of 4 solution(s) reach reward 1"
    assert task_containers(runtime) == []


def test_an_image_is_built_once_by_its_context_and_again_when_a_byte_changes(runtime, tmp_path):
    path = _task(tmp_path, "echo 1 > /logs/verifier/reward.txt\n")
    (path / "environment" / "nonce").write_text(uuid.uuid4().hex)  # a context no earlier run built
    task = load_task(path)
    results: list = []
    racers = [threading.Thread(target=lambda: results.append(ensure_image(runtime, task))) for _ in range(3)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert sorted(image.built for image in results) == [False, False, True], "three callers, one build"
    assert {image.tag for image in results} == {image_tag(task, context_hash(path / "environment"))}
    assert ensure_image(runtime, task).built is False
    (path / "environment" / "data.txt").write_text("one more byte")
    changed = ensure_image(runtime, load_task(path))
    runtime.run(["image", "rm", "-f", changed.tag, results[0].tag], timeout_s=120)
    assert changed.built and changed.tag != results[0].tag


def test_a_command_is_killed_inside_the_container_at_its_timeout(runtime, tmp_path):
    task = load_task(_task(tmp_path, "echo 1 > /logs/verifier/reward.txt\n"))
    with container_session(runtime, task, ensure_image(runtime, task), "test/timeout") as session:
        slow = session.run("sleep 300", timeout_s=1)
        left = session.run("ps -eo comm= 2>/dev/null || ls /proc | grep -c '^[0-9]'", timeout_s=10)
        loud = session.run("head -c 10000000 /dev/zero | tr '\\0' x", timeout_s=30)
        network = session.run("cat /proc/net/dev", timeout_s=10)
        assert session.workdir == "/app" and session.run("pwd", timeout_s=10).output.strip() == "/app"
    assert slow.timed_out and slow.exit_code is None
    assert "sleep" not in left.output
    assert loud.truncated and len(loud.output) < 40_000
    interfaces = {line.split(":")[0].strip() for line in network.output.splitlines()[2:]}
    assert interfaces == {"lo"}, "no network unless the task asks for it"
    assert task_containers(runtime) == []


FORGE = """\
mkdir -p /logs/verifier /tests
echo 1 > /logs/verifier/reward.txt
printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh
nohup sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.01; done' >/dev/null 2>&1 &
"""


def test_the_verifier_gets_a_clean_slate_whatever_the_agent_planted(runtime, tmp_path):
    test_sh = """\
    #!/bin/bash
    sleep 0.5
    if [ -f /app/answer ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
    """
    task = load_task(_task(tmp_path, test_sh))
    with container_session(runtime, task, ensure_image(runtime, task), "test/forge") as session:
        planted = session.run(FORGE, timeout_s=30)
        outcome = session.verify("done")
    assert planted.exit_code == 0, planted.output
    assert outcome.reward == 0.0, "the planted reward, test.sh and writer were all gone before the verifier"


def test_a_sigkilled_workers_container_is_reaped(runtime, tmp_path):
    task_dir = _task(tmp_path, "echo 1 > /logs/verifier/reward.txt\n")
    ensure_image(runtime, load_task(task_dir))
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys, time
                from pathlib import Path
                from rl_assets.containers.images import ensure_image
                from rl_assets.containers.runtime import container_runtime
                from rl_assets.containers.sessions import container_session
                from rl_assets.tasks.task import load_task
                runtime = container_runtime()
                task = load_task(Path({str(task_dir)!r}))
                with container_session(runtime, task, ensure_image(runtime, task), "test/killed"):
                    print("started", flush=True)
                    time.sleep(600)
            """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout.readline().strip() == "started", worker.communicate()[1]
    assert len(task_containers(runtime)) == 1
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    assert len(task_containers(runtime)) == 1, "a SIGKILLed worker cannot remove its container"
    assert len(reap(runtime)) == 1
    assert task_containers(runtime) == []


def test_a_container_task_experiment_trains_and_leaves_no_container(runtime, home, tmp_path):
    with ServedModel(script(), tmp_path) as server:
        result = train_json(
            home,
            *("--experiment", "containers", "--tasks", str(EXAMPLES), "--policy-url", server.base_url),
            *("--policy-model", POLICY_MODEL, "--steps", "2", "--samples", "1", "--max-turns", "4"),
        )
    trials = result["trials"]
    tasks = ["configure-service", "fix-package", "query-service", "summarize-json"]
    assert sorted(t["task"] for t in trials) == sorted(tasks * 2)
    assert all(t["verifier_reward"] == 1.0 and t["reward"] == 1.0 for t in trials), trials
    assert task_containers(runtime) == []


def test_a_sigkilled_container_run_leaves_containers_only_the_reaper_removes_and_then_finishes(
    runtime, home, stores, instance, tmp_path
):
    name = "containers-killed"
    # A fresh build context for one task (a byte no earlier run built), so its build count is exactly one.
    tasks = Path(tempfile.mkdtemp(dir=tmp_path)) / "tasks"
    shutil.copytree(EXAMPLES, tasks)
    (tasks / "summarize-json" / "environment" / "nonce").write_text(uuid.uuid4().hex)
    fresh = load_task(tasks / "summarize-json")
    slow = {"slow": 10_000, "slow_s": 0.5}  # every answer waits: the trials are inside their containers
    with ServedModel(script(faults=slow), tmp_path) as server:
        args = [
            *("--experiment", name, "--tasks", str(tasks), "--policy-url", server.base_url),
            *("--policy-model", POLICY_MODEL, "--steps", "1", "--samples", "2", "--max-turns", "4"),
        ]
        train = Train.start(home, args)
        try:
            wait_for(lambda: stores.model_calls.calls(name, "policy") >= 2, "2 answered calls", 600, train.proc)
            kill_train_tree(train, Watch(stores.db, instance, stores.experiments.get(name)), home)
        finally:
            train.close()
        left = task_containers(runtime)
        assert left, "a SIGKILLed worker's container outlives it"
        assert sorted(reap(runtime)) == sorted(left), "what rl-assets stop and every new attempt do"
        assert task_containers(runtime) == []
        code, out, err = run_train(home, args)
    assert code == 0, err[-3000:]
    assert all(t["reward"] == 1.0 for t in json.loads(out)["trials"])
    assert task_containers(runtime) == []
    fork = ("fork", "--from", name, "--experiment", f"{name}-fork", "--rubric", "task-done", "--json")
    run_cli(home, *fork)  # reuses every rollout: no container, no build
    # Each task's image across the crash, the rerun and the fork: one image, built at most once, the fresh one
    # exactly once (the task_images asset's materializations).
    builds = {}
    for task_name, world in stores.experiments.get(name).task_worlds.items():
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("task_images"), asset_partitions=[world]), limit=100
        ).records
        metadata = [r.asset_materialization.metadata for r in records]
        assert metadata and len({m["image_id"].value for m in metadata}) == 1, world
        builds[task_name] = sum(bool(m["image_built_now"].value) for m in metadata)
    assert builds[fresh.path.name] == 1 and all(count <= 1 for count in builds.values()), builds
    runtime.run(["image", "rm", "-f", image_tag(fresh, context_hash(fresh.path / "environment"))], timeout_s=120)


def test_flaky_and_hung_container_trials_and_judge_faults_change_nothing_but_the_retries(
    runtime, home, stores, tmp_path
):
    def served(faults: dict | None = None) -> dict:
        answers = script(faults)
        answers["judge"].append({"match": "", "answer": '{"score": 0.5, "reason": "scripted"}'})  # any container task
        return answers

    def train(name: str, server: ServedModel, *flags: str) -> dict:
        return train_json(
            home,
            *("--experiment", name, "--tasks", str(EXAMPLES), "--policy-url", server.base_url),
            *("--policy-model", POLICY_MODEL, "--judge-url", server.base_url, "--judge-model", JUDGE_MODEL),
            *("--steps", "1", "--samples", "2", "--max-turns", "4", "--trial-timeout", "30", *flags),
        )

    (tmp_path / "clean").mkdir()
    with ServedModel(served(), tmp_path / "clean") as server:
        clean = train("containers-calm", server)
    (tmp_path / "chaos").mkdir()
    flaky_server = {"server_errors": 1, "rate_limited": 1, "retry_after_s": 0.05}
    with ServedModel(served(flaky_server), tmp_path / "chaos") as server:
        flags = ("--flaky-trial-rate", "0.4", "--hang-trial-rate", "0.4", "--judge-flake-rate", "0.4")  # 4, 3, 3 hit
        chaos = train("containers-chaos", server, *flags)
        stats = server.stats()
    assert chaos["counts"]["generate_failures"] > 0, "the sandbox faults hit some first attempts"
    assert chaos["counts"]["judge_attempts"] > len(chaos["trials"]), "the judge faults hit some first attempts"
    rewards = lambda result: {t["trial_id"]: (t["reward"], t["turns"]) for t in result["trials"]}  # noqa: E731
    assert rewards(chaos) == rewards(clean) and len(clean["trials"]) == 8
    assert all(t["verifier_reward"] == 1.0 for t in chaos["trials"])
    for t in clean["trials"]:  # byte for byte the same dialogues and rewards: retries leave no trace in them
        slot = t["trial_id"].split("-", 1)[1]
        calm = stores.trials.trajectory("containers-calm", 0, slot)
        stormy = stores.trials.trajectory("containers-chaos", 0, slot)
        assert calm.transcript.content_hash == stormy.transcript.content_hash, slot
        assert calm.verifier.rewards == stormy.verifier.rewards, slot  # (pytest's output carries its timings)
    assert stats["answered"][JUDGE_MODEL] == chaos["counts"]["judge_calls"] == 8, "each verdict paid once"
    assert task_containers(runtime) == [], "the hung and the failed attempts' containers are gone too"


def test_a_removed_image_is_rebuilt_by_task_images_and_its_trials_rolled_out_again(
    runtime, home, stores, instance, tmp_path
):
    tasks = Path(tempfile.mkdtemp(dir=tmp_path)) / "tasks"
    shutil.copytree(EXAMPLES / "summarize-json", tasks / "summarize-json")
    (tasks / "summarize-json" / "environment" / "nonce").write_text(uuid.uuid4().hex)  # a context nobody built
    task = load_task(tasks / "summarize-json")
    tag = image_tag(task, context_hash(task.path / "environment"))
    args = ("--tasks", str(tasks), "--steps", "1", "--samples", "1", "--max-turns", "4")
    with ServedModel(script(), tmp_path) as server:
        model = ("--policy-url", server.base_url, "--policy-model", POLICY_MODEL)
        first = train_json(home, "--experiment", "image-seal", *model, *args)
        called = server.stats()["answered"][POLICY_MODEL]
        runtime.run(["image", "rm", "-f", tag], timeout_s=120)  # as an image prune would
        run_cli(home, "fork", "--from", "image-seal", "--experiment", "image-seal-fork", "--rubric", "task-done")
        recalled = server.stats()["answered"][POLICY_MODEL] - called
    world = stores.experiments.get("image-seal").task_worlds["summarize-json"]
    builds = [
        r.asset_materialization.metadata["image_built_now"].value
        for r in instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("task_images"), asset_partitions=[world]), limit=100
        ).records
    ]
    assert builds.count(True) == 2, "built for the experiment, built again once it was removed: never by a trial"
    assert first["trials"][0]["reward"] == 1.0
    assert recalled == called, "another image is another environment: the fork's trial was rolled out again"
    runtime.run(["image", "rm", "-f", tag], timeout_s=120)
    assert task_containers(runtime) == []


def _networks(runtime) -> list[str]:
    return list(labelled_networks(runtime, WORKER_LABEL))


def test_a_compose_tasks_sidecar_answers_on_the_attempts_own_network_and_nothing_else_does(runtime):
    task = load_task(EXAMPLES / "query-service")
    with container_session(runtime, task, ensure_image(runtime, task), "test/compose") as session:
        served = session.run("curl -fsS http://inventory:8000/stock.json", timeout_s=30)
        routes = session.run("cat /proc/net/route", timeout_s=10)
        assert len(task_containers(runtime)) == 2 and len(_networks(runtime)) == 1
    assert served.exit_code == 0 and '"sku": "bolt-m6"' in served.output
    destinations = [line.split()[1] for line in routes.output.splitlines()[1:]]
    assert destinations and "00000000" not in destinations, "an internal network: no default route out"
    assert task_containers(runtime) == [] and _networks(runtime) == []


def test_a_sigkilled_compose_workers_sidecars_and_network_are_reaped(runtime):
    task = load_task(EXAMPLES / "query-service")
    ensure_image(runtime, task)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import time
                from pathlib import Path
                from rl_assets.containers.images import built_image
                from rl_assets.containers.runtime import container_runtime
                from rl_assets.containers.sessions import container_session
                from rl_assets.tasks.task import load_task
                runtime = container_runtime()
                task = load_task(Path({str(task.path)!r}))
                with container_session(runtime, task, built_image(runtime, task), "test/compose-killed"):
                    print("started", flush=True)
                    time.sleep(600)
            """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout.readline().strip() == "started", worker.communicate()[1]
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    assert len(task_containers(runtime)) == 2 and len(_networks(runtime)) == 1, "a SIGKILLed worker removes nothing"
    assert len(reap(runtime)) == 2
    assert task_containers(runtime) == [] and _networks(runtime) == []
