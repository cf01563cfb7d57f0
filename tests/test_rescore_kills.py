"""Re-scoring and forks survive the same crashes as training: SIGKILL the whole tree mid-way, rerun.

After each kill a plain rerun of the same command gives the oracle's result, no recorded verdict is paid
again (each verdict key has one ``done`` call; extra calls are only those a kill left ``claimed``), a
re-scoring never generates, and each chain has one ledger row per step.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.stores.database import Database
from rl_assets_testkit.expectations import forked_expectation, rescored_expectation, table_of
from rl_assets_testkit.kills import Train, Watch, kill, run_train, train_args, wait_for

PARENT = ExperimentConfig(name="rescore-kill", steps=2, worlds=1, prompts=1, samples=2)
TRIALS = PARENT.steps * PARENT.prompts * PARENT.samples


def _rerun(home: Path, command: str, args: list[str]) -> dict:
    code, out, err = run_train(home, args, command=command)
    assert code == 0, err[-3000:]
    return json.loads(out)


def _calls(db: Database, experiment: str) -> list[tuple[str, str]]:
    with db.transaction() as cur:
        cur.execute("SELECT verdict_key, status FROM rl_judge_calls WHERE experiment = %s ORDER BY id", (experiment,))
        return cur.fetchall()


def _ledger_rows(db: Database, experiment: str, rubric: str) -> int:
    return int(
        db.scalar("SELECT count(*) FROM rl_train_ledger WHERE experiment = %s AND rubric = %s", (experiment, rubric))
    )


def _assert_no_verdict_paid_twice(db: Database, experiment: str, result: dict) -> int:
    calls = _calls(db, experiment)
    done = Counter(key for key, status in calls if status == "done")
    assert all(n == 1 for n in done.values()), f"verdicts paid twice: {[k for k, n in done.items() if n > 1]}"
    claimed = sum(1 for _, status in calls if status == "claimed")
    assert result["counts"]["judge_calls"] == len(calls) == len(done) + claimed
    return claimed


def test_sigkill_mid_rescore_then_rerun_gives_the_rescored_result(home, stores, instance):
    args = train_args(PARENT, {"tool_latency": 0.1, "judge_latency": 1.0})
    code, out, err = run_train(home, args)
    assert code == 0, err[-3000:]
    trained = json.loads(out)

    rescore = ["--experiment", PARENT.name, "--rubric", "v2-efficiency"]
    v2 = PARENT.scored_with("v2-efficiency")
    watch = Watch(stores.db, instance, v2)
    train = Train.start(home, rescore, command="rescore")
    try:
        wait_for(
            lambda: len(_calls(stores.db, PARENT.name)) > TRIALS, "a re-scoring judge call", while_running=train.proc
        )
        landed = kill("tree", train, watch, home)
    finally:
        train.close()
    assert landed.pids, landed

    result = _rerun(home, "rescore", rescore)
    assert (table_of(result), result["weights"]) == rescored_expectation(PARENT, "v2-efficiency")
    assert result["counts"]["generate_attempts"] == trained["counts"]["generate_attempts"], "never generates"
    claimed = _assert_no_verdict_paid_twice(stores.db, PARENT.name, result)
    assert result["counts"]["judge_calls"] == 2 * TRIALS + claimed
    assert _ledger_rows(stores.db, PARENT.name, "v2-efficiency") == PARENT.steps
    assert _ledger_rows(stores.db, PARENT.name, "v1") == PARENT.steps, "v1's chain is untouched"
    assert _rerun(home, "rescore", rescore) == result, "a finished re-scoring does nothing"


def test_sigkill_mid_fork_then_rerun_gives_the_forked_result(home, stores, instance):
    code, _, err = run_train(home, train_args(PARENT, {"tool_latency": 0.1, "judge_latency": 1.0}))
    assert code == 0, err[-3000:]
    fork_config = PARENT.model_copy(update={"name": "rescore-kill-fork", "rubric": "v2-efficiency"})
    fork = ["--from", PARENT.name, "--experiment", fork_config.name, "--rubric", "v2-efficiency"]
    watch = Watch(stores.db, instance, fork_config)
    train = Train.start(home, fork, command="fork")
    try:
        landed = kill("tree", train, watch, home, after_progress=1)
    finally:
        train.close()
    assert landed.pids, landed

    result = _rerun(home, "fork", fork)
    assert (table_of(result), result["weights"]) == forked_expectation(PARENT, "v2-efficiency")
    claimed = _assert_no_verdict_paid_twice(stores.db, fork_config.name, result)
    assert result["counts"]["judge_calls"] == TRIALS + claimed
    assert _ledger_rows(stores.db, fork_config.name, "v2-efficiency") == PARENT.steps
    assert _rerun(home, "fork", fork) == result
