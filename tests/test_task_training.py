"""A Harbor task set trained end to end: the chat agent against the stand-in model server, the tasks' verifiers.

The stand-in (:mod:`rl_assets.testing.model_server`) is a real HTTP server process speaking the OpenAI
API; everything else is the real thing: Dagster on Postgres, a process per trial, the task sandbox.
"""

from __future__ import annotations

from pathlib import Path

from rl_assets.testing.example_solutions import POLICY_MODEL, SOLUTIONS, script
from rl_assets.testing.expectations import train_json
from rl_assets.testing.served_model import ServedModel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"


def _train(home: Path, name: str, server: ServedModel, *extra: str) -> dict:
    return train_json(
        home,
        *("--experiment", name, "--tasks", str(EXAMPLES), "--policy-url", server.base_url),
        *("--policy-model", POLICY_MODEL, "--steps", "2", "--samples", "2", "--max-turns", "8", *extra),
    )


def test_every_example_task_is_solved_and_every_call_is_billed_once(home, tmp_path):
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


def test_sandbox_faults_and_a_flaky_server_change_nothing_but_the_retries(home, stores, tmp_path):
    (tmp_path / "clean").mkdir()
    with ServedModel(script(), tmp_path / "clean") as server:
        clean = _train(home, "tasks-calm", server, "--trial-timeout", "10")
    faults = {"server_errors": 1, "rate_limited": 1, "retry_after_s": 0.05}
    (tmp_path / "chaos").mkdir()
    with ServedModel(script(faults), tmp_path / "chaos") as server:
        chaos = _train(
            home,
            "tasks-chaos",
            server,
            "--flaky-trial-rate",
            "0.3",
            "--hang-trial-rate",
            "0.2",
            "--trial-timeout",
            "20",
        )
        stats = server.stats()
    assert chaos["counts"]["generate_failures"] > 0, "the sandbox faults hit some first attempts"
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
