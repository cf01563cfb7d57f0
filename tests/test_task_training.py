"""A Harbor task set trained end to end: the chat agent against the stand-in model server, the tasks' verifiers.

The stand-in (:mod:`rl_assets_testkit.model_server`) is a real HTTP server process speaking the OpenAI
API; everything else is the real thing: Dagster on Postgres, a process per trial, the task sandbox.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import dagster as dg

from rl_assets.domain.transcript_markdown import MESSAGE_CHARS
from rl_assets.home.layout import Home
from rl_assets.home.services.daemon import LocalDaemon
from rl_assets_testkit.example_solutions import (
    JUDGE_MODEL,
    JUDGE_SCORES,
    POLICY_MODEL,
    SOLUTIONS,
    STRICT_MARKER,
    script,
)
from rl_assets_testkit.expectations import run_cli, train_json
from rl_assets_testkit.served_model import ServedModel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"


def _train(home: Path, name: str, server: ServedModel, *extra: str, steps: int = 2) -> dict:
    return train_json(
        home,
        *("--experiment", name, "--tasks", str(EXAMPLES), "--policy-url", server.base_url),
        *("--policy-model", POLICY_MODEL, "--steps", str(steps), "--samples", "2", "--max-turns", "8", *extra),
    )


def test_every_example_task_is_solved_and_every_call_is_billed_once(home, instance, tmp_path):
    with ServedModel(script(), tmp_path) as server:
        result = _train(home, "tasks-clean", server)
        answered = server.stats()["answered"]
    trials = result["trials"]
    assert [t["trial_id"] for t in trials][:3] == ["s0-create-file-n0", "s0-create-file-n1", "s0-edit-config-n0"]
    assert len(trials) == 2 * 4 * 2
    assert all(t["verifier_reward"] == 1.0 and t["judge_score"] is None and t["reward"] == 1.0 for t in trials)
    assert all(t["turns"] == len(SOLUTIONS[t["task"]]) for t in trials)
    assert result["counts"]["policy_calls"] == answered[POLICY_MODEL] == sum(t["turns"] for t in trials)
    cost = result["cost"]
    assert cost["policy_prompt_tokens"] == sum(t["policy_prompt_tokens"] for t in trials) > 0
    assert cost["policy_completion_tokens"] == sum(t["policy_completion_tokens"] for t in trials) > 0
    assert cost["unpriced_models"] == [POLICY_MODEL] and cost["usd"] == 0.0
    assert [s["mean_reward"] for s in result["steps"]] == [1.0, 1.0]
    # Each step's bill is on its weights materialization, for the UI's plots.
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("weights"), asset_partitions=["tasks-clean/s1"]), limit=1
    ).records[0]
    metadata = record.asset_materialization.metadata
    assert metadata["policy_calls"].value == sum(t["turns"] for t in trials if t["step"] == 1)
    # The UI shows each trial as it went: the conversation, the tool calls, the verifier.
    trajectory = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey("trajectories"), asset_partitions=["tasks-clean/s1|hidden-test-n0"]
        ),
        limit=1,
    ).records[0]
    transcript = trajectory.asset_materialization.metadata["transcript"].value
    assert "slugify" in transcript and "calls `write_file`" in transcript and "**verifier**: reward 1" in transcript
    # A person reading `status` sees each task's means and the bill.
    status = run_cli(home, "status", "--experiment", "tasks-clean").stdout
    rows = {line.split()[0]: line.split()[1:] for line in status.splitlines() if line.split()}
    assert rows["fix-python-function"] == ["4", "1.000", "-", "1.000", "4.00"]
    assert f"cost: policy {cost['policy_prompt_tokens']} + {cost['policy_completion_tokens']} tokens" in status
    summed = json.loads(run_cli(home, "status", "--experiment", "tasks-clean", "--json").stdout)
    assert "trials" not in summed, "status reads the steps' per-task sums, not each trial's records"
    assert [t["task"] for t in summed["tasks"]] == sorted(SOLUTIONS) and {t["trials"] for t in summed["tasks"]} == {4}


def test_sandbox_faults_and_a_flaky_server_change_nothing_but_the_retries(home, stores, tmp_path):
    judged = ("--judge-url", "{url}", "--judge-model", JUDGE_MODEL, "--trial-timeout", "10")
    (tmp_path / "clean").mkdir()
    with ServedModel(script(), tmp_path / "clean") as server:
        clean = _train(home, "tasks-calm", server, *(a.format(url=server.base_url) for a in judged), steps=1)
    faults = {"server_errors": 1, "rate_limited": 1, "retry_after_s": 0.05}
    (tmp_path / "chaos").mkdir()
    with ServedModel(script(faults), tmp_path / "chaos") as server:
        flags = ("--flaky-trial-rate", "0.3", "--hang-trial-rate", "0.2", "--judge-flake-rate", "0.3")
        chaos = _train(home, "tasks-chaos", server, *flags, *(a.format(url=server.base_url) for a in judged), steps=1)
        stats = server.stats()
    assert chaos["counts"]["generate_failures"] > 0, "the sandbox faults hit some first attempts"
    assert chaos["counts"]["judge_attempts"] > len(chaos["trials"]), "the judge faults hit some first attempts"
    assert stats["faults"]["rate_limited"] > 0 and stats["faults"]["server_errors"] > 0
    rewards = lambda result: {t["trial_id"]: (t["reward"], t["turns"]) for t in result["trials"]}  # noqa: E731
    assert rewards(chaos) == rewards(clean)
    # Byte for byte the same trajectories: retried model calls and retried attempts leave no trace in them.
    for t in clean["trials"]:
        slot = t["trial_id"].split("-", 1)[1]
        calm = stores.trials.trajectory("tasks-calm", t["step"], slot)
        stormy = stores.trials.trajectory("tasks-chaos", t["step"], slot)
        assert calm.content_hash == stormy.content_hash, t["trial_id"]
    # Every answered request is billed once, the hung attempts' answered calls included; refused ones never.
    assert chaos["counts"]["policy_calls"] == stats["answered"][POLICY_MODEL]
    # The judge answered once per trajectory, whatever failed around it.
    assert stats["answered"][JUDGE_MODEL] == chaos["counts"]["judge_calls"] == len(chaos["trials"])


STRICT_RUBRIC = f"""name = "strict-judge"
scale = "{STRICT_MARKER}: 1 only for work a reviewer would merge as is"
template = '''
Task: $instruction
Transcript: $transcript
Verifier reward: $reward
Grade it $scale. Answer {{"score": <0 to 1>}}.
'''
"""


POLICY_KEY = "sk-policy-SENTINEL-c0ffee5e"
JUDGE_KEY = "sk-judge-SENTINEL-c0ffee5e"
ROTATED_JUDGE_KEY = "sk-judge-ROTATED-c0ffee5e"
LEFTOVER_KEY = "sk-leftover-of-whoever-started-the-daemon"


def _materializations(instance, asset: str, partitions: list[str]) -> list[dg.AssetMaterialization]:
    """Every materialization of ``asset`` in ``partitions``, oldest first."""
    found, cursor = [], None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=partitions),
            limit=100,
            cursor=cursor,
            ascending=True,
        )
        found += [r.asset_materialization for r in page.records]
        if not page.has_more:
            return found
        cursor = page.cursor


def test_an_llm_judge_is_paid_once_per_trajectory_and_rescoring_calls_no_policy(home, instance, tmp_path):
    # The keys are the home's, named by the experiment and read by the run workers when they call: the daemon
    # is started here by a process holding a key in its environment, which no run may ever present; the
    # judge's key is replaced between training and re-scoring, with no restart.
    daemon = LocalDaemon(Home(home))
    daemon.stop()
    leftovers = {"RL_ASSETS_POLICY_API_KEY": LEFTOVER_KEY, "RL_ASSETS_JUDGE_API_KEY": LEFTOVER_KEY}
    try:
        with mock.patch.dict(os.environ, {**leftovers, "OPENAI_API_KEY": LEFTOVER_KEY}):
            pid = daemon.ensure_running()
        assert LEFTOVER_KEY not in Path(f"/proc/{pid}/environ").read_text(errors="replace")
        for name, key in (("policy-test", POLICY_KEY), ("judge-test", JUDGE_KEY)):
            run_cli(home, "keys", "set", name, "--from-env", "KEY", env={"KEY": key})
        with ServedModel(script(), tmp_path) as server:
            judge = ("--judge-url", server.base_url, "--judge-model", JUDGE_MODEL, "--judge-key-name", "judge-test")
            train = ("train", "--experiment", "tasks-judged", "--tasks", str(EXAMPLES), "--policy-url")
            train += (server.base_url, "--policy-model", POLICY_MODEL, "--policy-key-name", "policy-test")
            procs = [run_cli(home, *train, "--steps", "1", "--samples", "2", "--max-turns", "8", *judge, "--json")]
            judged = json.loads(procs[-1].stdout)
            after_training = server.stats()["answered"]
            bearers_training = server.stats()["bearers"]
            rotate = ("keys", "set", "judge-test", "--from-env", "KEY")
            procs.append(run_cli(home, *rotate, env={"KEY": ROTATED_JUDGE_KEY}))
            rubric = tmp_path / "strict-judge.toml"
            rubric.write_text(STRICT_RUBRIC)
            run_cli(home, "rubrics", "--add", str(rubric))
            rescore = ("rescore", "--experiment", "tasks-judged", "--rubric", "strict-judge", "--json")
            procs.append(run_cli(home, *rescore))
            rescored = json.loads(procs[-1].stdout)
            after_rescoring = server.stats()["answered"]
            fork = ("fork", "--from", "tasks-judged", "--experiment", "tasks-fork", "--rubric", "strict-judge")
            procs.append(run_cli(home, *fork, "--json"))
            forked = json.loads(procs[-1].stdout)
            after_forking = server.stats()["answered"]
            bearers = server.stats()["bearers"]
            procs.append(run_cli(home, "keys", "list"))
    finally:
        daemon.stop()
    assert judged["trials"], judged
    assert judged["rubric"] == "task-done"
    trials = judged["trials"]
    assert all(t["judge_score"] == JUDGE_SCORES[t["task"]] for t in trials)
    assert all(t["reward"] == t["verifier_reward"] + t["judge_score"] for t in trials)
    assert all(t["judge_prompt_tokens"] > 0 and t["judge_completion_tokens"] > 0 for t in trials)
    assert judged["counts"]["judge_calls"] == len(trials) == after_training[JUDGE_MODEL]
    assert judged["cost"]["judge_prompt_tokens"] == sum(t["judge_prompt_tokens"] for t in trials)
    # Re-scoring judges the stored trajectories again under the new rubric: no rollout, no policy call.
    assert after_rescoring[POLICY_MODEL] == after_training[POLICY_MODEL]
    assert after_rescoring[JUDGE_MODEL] == after_training[JUDGE_MODEL] + len(trials)
    assert {t["judge_score"] for t in rescored["trials"]} == {0.0}
    assert [t["trial_id"] for t in rescored["trials"]] == [t["trial_id"] for t in trials]
    # A fork reuses every rollout (no policy call) and pays its own verdicts (verdicts are per experiment).
    assert after_forking[POLICY_MODEL] == after_training[POLICY_MODEL]
    assert after_forking[JUDGE_MODEL] == after_rescoring[JUDGE_MODEL] + len(trials)
    assert forked["counts"]["generate_attempts"] == 0 and {t["judge_score"] for t in forked["trials"]} == {0.0}
    # Each reward carries the judge's reason and the verifier's output, each capped, for the UI.
    slots = [t["trial_id"].split("-", 1)[1] for t in trials]
    rewards = _materializations(instance, "rewards", [f"tasks-judged/s0|{slot}" for slot in slots])
    assert {m.metadata["rubric"].value for m in rewards} == {"task-done", "strict-judge"}
    for m in rewards:
        assert 0 < len(m.metadata["judge_reason"].value) <= MESSAGE_CHARS
        fenced = m.metadata["verifier_output"].value
        assert fenced.startswith("```\n") and fenced.endswith("\n```")
        assert len(fenced.removeprefix("```\n").removesuffix("\n```")) <= MESSAGE_CHARS
    trained = next(
        m.metadata
        for m in rewards
        if m.partition == "tasks-judged/s0|fix-python-function-n0" and m.metadata["rubric"].value == "task-done"
    )
    assert trained["judge_reason"].value == "scripted"
    assert trained["verifier_output"].value == "```\nall cases pass\n\n```"  # what its tests/test_stats.py prints
    # The keys were sent (the server saw them, and only them) and are recorded nowhere: not in any
    # materialization of the two experiments, not in what the commands printed.
    assert bearers_training == sorted([POLICY_KEY, JUDGE_KEY])
    assert bearers == sorted([POLICY_KEY, JUDGE_KEY, ROTATED_JUDGE_KEY])  # the new key, read at the next call
    assert procs[-1].stdout.split() == ["judge-test", "policy-test"]
    recorded = []
    for name in ("tasks-judged", "tasks-fork"):
        steps = [f"{name}/s0"]
        recorded += _materializations(instance, "trajectories", [f"{name}/s0|{slot}" for slot in slots])
        recorded += _materializations(instance, "rewards", [f"{name}/s0|{slot}" for slot in slots])
        recorded += _materializations(instance, "weights", steps)
    kinds = {(m.asset_key.path[0], m.partition.split("/")[0]) for m in recorded}
    assert kinds == {(a, e) for a in ("trajectories", "rewards", "weights") for e in ("tasks-judged", "tasks-fork")}
    for m in recorded:
        for key in (POLICY_KEY, JUDGE_KEY, ROTATED_JUDGE_KEY):
            assert key not in repr(m.metadata), (m.asset_key, m.partition)
    for proc in procs:
        assert all(key not in proc.stdout + proc.stderr for key in (POLICY_KEY, JUDGE_KEY, ROTATED_JUDGE_KEY))


def test_a_weights_rubric_cannot_judge_a_task_experiment(home, tmp_path):
    with ServedModel(script(), tmp_path) as server:
        refused = run_cli(
            home,
            *("train", "--experiment", "tasks-v1", "--tasks", str(EXAMPLES), "--policy-url", server.base_url),
            *("--policy-model", POLICY_MODEL, "--judge-url", server.base_url, "--judge-model", JUDGE_MODEL),
            *("--rubric", "v2-efficiency"),
            check=False,
        )
        answered = server.stats()["answered"]
    assert refused.returncode == 2
    assert "an LLM judge needs a judge rubric" in refused.stderr
    assert answered == {}


def test_an_agent_acting_by_fenced_commands_trains_and_its_protocol_is_recorded(home, tmp_path):
    """``--agent-protocol text``: a model without tool calling acts by fenced shell blocks, end to end."""
    write = "printf 'Hello, Harbor!\\nTasks are directories.\\n' > greeting.txt"
    turns = [{"content": f"```bash\n{write}\n```"}, {"content": "Done."}]
    text_script = {**script(), "tasks": [{"match": "greeting.txt", "turns": turns}]}
    with ServedModel(text_script, tmp_path) as server:
        result = train_json(
            home,
            *("--experiment", "tasks-text", "--tasks", str(EXAMPLES / "create-file"), "--agent-protocol", "text"),
            *("--policy-url", server.base_url, "--policy-model", POLICY_MODEL, "--steps", "1", "--samples", "1"),
        )
        fields = server.stats()["fields"]
    assert [(t["trial_id"], t["reward"], t["turns"]) for t in result["trials"]] == [("s0-create-file-n0", 1.0, 2)]
    assert "tools" not in fields
    shown = run_cli(home, "show", "--experiment", "tasks-text", "s0-create-file-n0").stdout
    assert "acting by the `text` protocol" in shown and "**user**\n```\nexit code 0\n" in shown


def test_an_experiment_without_a_judge_does_not_wait_for_the_judge_pool(home, instance, tmp_path):
    """The ``judge`` pool bounds judge calls; a verifier-only experiment makes none, so its trials train while the
    pool admits nobody (a limit of 0, as an owner pausing the LLM judges would set), and none claims a slot."""
    storage = instance.event_log_storage
    storage.set_concurrency_slots("judge", 0)
    try:
        with ServedModel(script(), tmp_path) as server:
            proc = run_cli(
                home,
                *("train", "--experiment", "tasks-unjudged", "--tasks", str(EXAMPLES / "create-file")),
                *("--policy-url", server.base_url, "--policy-model", POLICY_MODEL, "--steps", "1", "--samples", "3"),
                "--json",
                timeout=300,  # waiting for a slot, the trials would never be rewarded
            )
        assert storage.get_concurrency_info("judge").claimed_slots == []
    finally:
        storage.delete_concurrency_limit("judge")
    result = json.loads(proc.stdout)
    assert [(t["trial_id"], t["reward"]) for t in result["trials"]] == [(f"s0-create-file-n{i}", 1.0) for i in range(3)]
    assert result["counts"]["judge_calls"] == 0
