"""The verifier: the reward read from ``/logs/verifier`` (each way to fail is its own error), and the phase itself.

The reading is tested on directories made here; the phase runs a task's ``tests/test.sh`` through the
real task sandbox after agent commands, including agents that try to forge the reward or to see the tests.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rl_assets.sandbox.launcher import isolation
from rl_assets.sandbox.protocol import ForkLayout
from rl_assets.sandbox.task_trial import run_oracle, task_shell, verify
from rl_assets.tasks.task import Task, load_task
from rl_assets.tasks.verifier import (
    REWARD_FILE_BYTES,
    RewardFileEmpty,
    RewardFileMissing,
    RewardFileUnsafe,
    RewardKeyMissing,
    RewardNotFinite,
    RewardParseError,
    VerifierTimeout,
    read_rewards,
)
from rl_assets.worlds.local import LocalWorlds

# -- reading the reward ----------------------------------------------------------------------------


def logs_with(tmp_path: Path, **files: str | bytes) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name, content in files.items():
        path = logs / name.replace("_", ".")
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return logs


def test_reward_json_is_preferred_and_read_whole(tmp_path):
    logs = logs_with(tmp_path, reward_json='{"reward": 0.5, "tests_passed": 3}', reward_txt="1")
    assert read_rewards(logs) == {"reward": 0.5, "tests_passed": 3.0}


def test_reward_txt_is_one_number(tmp_path):
    assert read_rewards(logs_with(tmp_path, reward_txt=" 1\n")) == {"reward": 1.0}


@pytest.mark.parametrize(
    "files, error",
    [
        ({}, RewardFileMissing),
        ({"reward_txt": ""}, RewardFileEmpty),
        ({"reward_txt": " \n"}, RewardFileEmpty),
        ({"reward_json": ""}, RewardFileEmpty),
        ({"reward_txt": "passed"}, RewardParseError),
        ({"reward_txt": "1 2"}, RewardParseError),
        ({"reward_txt": b"\xff\xfe"}, RewardParseError),
        ({"reward_json": "{"}, RewardParseError),
        ({"reward_json": "[1]"}, RewardParseError),
        ({"reward_json": '{"reward": "1"}'}, RewardParseError),
        ({"reward_json": '{"reward": true}'}, RewardParseError),
        ({"reward_json": '{"reward": 1, "detail": {"a": 1}}'}, RewardParseError),
        ({"reward_txt": "nan"}, RewardNotFinite),
        ({"reward_txt": "-inf"}, RewardNotFinite),
        ({"reward_json": '{"reward": NaN}'}, RewardNotFinite),
        ({"reward_json": '{"reward": 1e999}'}, RewardNotFinite),
        ({"reward_json": '{"reward": 1' + "0" * 400 + "}"}, RewardNotFinite),
        ({"reward_json": '{"score": 1.0}'}, RewardKeyMissing),
        ({"reward_json": "{", "reward_txt": "1"}, RewardParseError),  # a broken JSON is not skipped for the text
        ({"reward_txt": "1" + " " * REWARD_FILE_BYTES}, RewardFileUnsafe),
    ],
)
def test_each_way_to_produce_no_reward_is_its_own_error(tmp_path, files, error):
    with pytest.raises(error):
        read_rewards(logs_with(tmp_path, **files))


def test_a_link_or_a_special_file_is_refused_not_followed(tmp_path):
    outside = tmp_path / "forged.txt"
    outside.write_text("1")
    logs = logs_with(tmp_path)
    (logs / "reward.txt").symlink_to(outside)
    with pytest.raises(RewardFileUnsafe):
        read_rewards(logs)
    (logs / "reward.txt").unlink()
    os.mkfifo(logs / "reward.txt")  # a reader would block forever on a FIFO without a writer
    with pytest.raises(RewardFileUnsafe):
        read_rewards(logs)
    (logs / "reward.txt").unlink()
    (logs / "reward.json").mkdir()
    with pytest.raises(RewardFileUnsafe):
        read_rewards(logs)


# -- the verifier phase through the sandbox --------------------------------------------------------


def make_task(root: Path, test_sh: str, verifier: str = "timeout_sec = 30.0", env: str = "") -> Task:
    path = root / "task"
    for d in ("tests", "environment", "solution"):
        (path / d).mkdir(parents=True)
    (path / "instruction.md").write_text("Write answer.txt.\n")
    (path / "task.toml").write_text(f'schema_version = "1.4"\n[verifier]\n{verifier}\n[environment]\n{env}\n')
    (path / "tests" / "test.sh").write_text(test_sh)
    (path / "tests" / "expected.txt").write_text("42\n")
    (path / "environment" / "notes.txt").write_text("notes\n")
    return load_task(path)


@pytest.fixture
def fork(tmp_path: Path) -> Iterator[ForkLayout]:
    if isolation().name != "bwrap":
        pytest.fail(f"isolation {isolation().name!r}: no user namespaces for the task sandbox on this machine")
    worlds = LocalWorlds(tmp_path / "worlds", tmp_path / "forks")
    worlds.world_dir("w").mkdir(parents=True)
    (worlds.world_dir("w") / "notes.txt").write_text("notes\n")
    worlds.reseal("w")
    with worlds.fork("w", "trial", "a0", overlay=True) as layout:
        yield layout


CHECK_ANSWER = """#!/bin/bash
if cmp -s answer.txt /tests/expected.txt; then reward=1; else reward=0; fi
echo $reward > /logs/verifier/reward.txt
"""
WRITES_NOTHING = "#!/bin/bash\necho 'verifier ran'\n"


def test_the_verifier_sees_the_agents_work_its_tests_a_fresh_log_dir_and_its_env(tmp_path, fork):
    test_sh = (
        "#!/bin/bash\nset -e\n"
        'printf \'{"reward": %s, "cwd_is_workdir": %s, "logs_empty": %s, "env": %s}\' '
        '"$(cmp -s answer.txt /tests/expected.txt && echo 1 || echo 0)" "$([ "$PWD" = /app ] && echo 1 || echo 0)" '
        '"$(ls -A /logs/verifier | wc -l)" "$VERIFIER_FLAG" > /logs/verifier/reward.json\n'
        "echo done; exit 3\n"
    )
    task = make_task(tmp_path, test_sh, verifier="timeout_sec = 30.0\nenv = { VERIFIER_FLAG = '7' }")
    with task_shell(task, fork) as shell:
        assert shell.run("echo 42 > answer.txt", 10).exit_code == 0
        result = verify(shell, task)
    # /logs/verifier holds only the harness's two reward files (FIFOs whose writes it takes, see test_reward_attacks)
    assert result.rewards == {"reward": 1.0, "cwd_is_workdir": 1.0, "logs_empty": 2.0, "env": 7.0}
    assert result.reward == 1.0 and result.output == "done\n" and result.exit_code == 3 and result.seconds > 0
    assert result.provenance == "verifier" and result.neutralised == ()


def test_a_verifier_past_its_timeout_is_a_timeout_error(tmp_path, fork):
    task = make_task(tmp_path, "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\nsleep 30\n", "timeout_sec = 0.5")
    with task_shell(task, fork) as shell, pytest.raises(VerifierTimeout):
        verify(shell, task)


def test_a_verifier_that_writes_nothing_is_an_error_carrying_its_output(tmp_path, fork):
    task = make_task(tmp_path, WRITES_NOTHING)
    with task_shell(task, fork) as shell, pytest.raises(RewardFileMissing) as err:
        verify(shell, task)
    assert err.value.output == "verifier ran\n"


def test_the_agent_cannot_see_the_tests_or_the_verifiers_logs(tmp_path, fork):
    task = make_task(tmp_path, CHECK_ANSWER)
    with task_shell(task, fork) as shell:
        for probe in (
            "ls /tests",
            "cat /tests/expected.txt",
            "ls /logs",
            "find / -name expected.txt 2>/dev/null | grep .",
        ):
            assert shell.run(probe, 10).exit_code != 0, probe
        assert verify(shell, task).reward == 0.0, "the agent wrote no answer"


def test_a_reward_forged_during_the_agent_phase_is_not_read(tmp_path, fork):
    task = make_task(tmp_path, WRITES_NOTHING)
    forgeries = (
        "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",
        "echo 1 > reward.txt; echo '{\"reward\": 1}' > reward.json",
        "mkdir -p logs/verifier; echo 1 > logs/verifier/reward.txt",
        "echo 1 > /tmp/reward.txt; ln -s /app/reward.txt /tmp/link",
    )
    with task_shell(task, fork) as shell:
        assert shell.run(forgeries[0], 10).exit_code != 0, "no /logs to write in the agent's sandbox"
        for forgery in forgeries[1:]:
            assert shell.run(forgery, 10).exit_code == 0
        with pytest.raises(RewardFileMissing):
            verify(shell, task)


def test_a_background_process_cannot_write_the_reward_later(tmp_path, fork):
    task = make_task(tmp_path, WRITES_NOTHING + "sleep 1\n")  # a window for the planted process, had it survived
    plant = (
        "(for i in $(seq 200); do mkdir -p /logs/verifier 2>/dev/null && echo 1 > /logs/verifier/reward.txt;"
        " echo 1 > /app/reward.txt; sleep 0.01; done) >/dev/null 2>&1 & disown; echo planted"
    )
    with task_shell(task, fork) as shell:
        assert shell.run(plant, 10).output == "planted\n"
        with pytest.raises(RewardFileMissing):
            verify(shell, task)


def test_verifiers_beside_processes_spawned_from_other_threads_are_not_flagged():
    """A rollout run verifies many trials in one process while other threads spawn sandboxes: a child forked
    while the verifier's files were being written holds a copy of the write descriptor until its exec, whose
    close the reward guard would take for a change to its files (``/run/rl-assets/bash was changed``)."""
    task = load_task(Path(__file__).resolve().parents[1] / "examples" / "tasks" / "create-file")
    stop = threading.Event()

    def spawn() -> None:
        while not stop.is_set():
            subprocess.run(["true"], check=True)

    spawners = [threading.Thread(target=spawn, daemon=True) for _ in range(3)]
    for thread in spawners:
        thread.start()
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            runs = list(pool.map(lambda _: run_oracle(task), range(18)))
    finally:
        stop.set()
        for thread in spawners:
            thread.join()
    assert [(r.reward, r.error) for r in runs] == [(1.0, None)] * len(runs)
