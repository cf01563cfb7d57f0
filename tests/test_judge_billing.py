"""What each paid judge call became, against the real Postgres: no fault bills twice, every extra call has its cause.

The judge here is the simulated one (a paid LLM API cannot exist in a test); its latency stands in for the
API's. Timeouts are real: the call runs on, in its thread, after its caller stopped waiting.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Verdict
from rl_assets.domain.scoring import simulated_judge
from rl_assets.home.services.postgres import PostgresInfo
from rl_assets.resources.judge import JudgeResource
from rl_assets.stores.database import Database
from rl_assets.stores.verdicts import (
    ANSWERED,
    DIED,
    DUPLICATE,
    ERROR,
    IN_FLIGHT,
    LATE_ANSWER_USED,
    TIMEOUT,
    JudgeTimeout,
    VerdictLedger,
)
from rl_assets_testkit.expectations import cli_args, oracle_expectation, run_cli, table_of, train_json
from rl_assets_testkit.kills import wait_for
from rl_assets_testkit.samples import RUBRIC, sample_trajectory


def _experiment() -> str:
    return f"billing-{uuid.uuid4().hex[:8]}"


def _calls(db: Database, experiment: str) -> list[tuple[str, bool, str | None, str | None]]:
    """``(status, timed out, cause, error)`` of every call of ``experiment``, in order."""
    with db.transaction() as cur:
        cur.execute(
            "SELECT status, timed_out_at IS NOT NULL, cause, error FROM rl_judge_calls WHERE experiment = %s "
            "ORDER BY id",
            (experiment,),
        )
        return cur.fetchall()


class JudgeUnavailable(RuntimeError):
    """What a judge API raises after the request was sent (a 5xx, a dropped response)."""


def test_a_late_answer_after_a_timeout_is_recorded_and_used_not_paid_again(stores):
    judge = JudgeResource(judge_id="late-test")
    trajectory, experiment = sample_trajectory(), _experiment()
    with pytest.raises(JudgeTimeout, match="within 0.3s"):
        judge.judge(stores.verdicts, trajectory, RUBRIC, experiment, latency_s=1.5, timeout_s=0.3)
    assert _calls(stores.db, experiment) == [("timed_out", True, None, None)], "the timeout is recorded as one"

    # The retry waits for the call it gave up on (billing nothing meanwhile) and uses its late answer.
    verdict, cache_hit = judge.judge(stores.verdicts, trajectory, RUBRIC, experiment, latency_s=1.5, timeout_s=5)
    assert cache_hit and verdict == simulated_judge(trajectory, RUBRIC)
    assert _calls(stores.db, experiment) == [("done", True, None, None)], "one call, paid once, its answer used"
    billing = stores.verdicts.billing(experiment)
    assert billing == {
        "calls": 1,
        "verdicts": 1,
        "extra_calls": 0,
        "extra_call_causes": {},
        "outcomes": {LATE_ANSWER_USED: 1},
    }
    again, cache_hit = judge.judge(stores.verdicts, trajectory, RUBRIC, experiment, latency_s=1.5, timeout_s=5)
    assert cache_hit and again == verdict and len(_calls(stores.db, experiment)) == 1


def test_a_judge_slower_than_its_timeout_bills_each_trial_once_in_train_and_a_rerun_pays_nothing(home):
    """``train`` with a judge latency above ``--judge-timeout``: every first attempt times out, its retry uses the
    late answer; the report shows one call per trial and why each was late; the rerun pays nothing."""
    name = _experiment()
    fields = dict(steps=1, worlds=1, prompts=1, samples=2)
    args = [*cli_args(name, fields), "--judge-latency", "1.5", "--judge-timeout", "1"]
    result = train_json(home, *args)
    table, weights = oracle_expectation(ExperimentConfig(name=name, **fields))
    assert table_of(result) == table and result["weights"] == weights
    assert result["counts"]["judge_calls"] == 2 and result["counts"]["judge_attempts"] == 4, "each trial retried"

    report = json.loads(run_cli(home, "report", "--experiment", name, "--json").stdout)
    assert report["judge_calls"] == {
        "calls": 2,
        "verdicts": 2,
        "extra_calls": 0,
        "extra_call_causes": {},
        "outcomes": {LATE_ANSWER_USED: 2},
    }
    assert f"call outcomes {LATE_ANSWER_USED}: 2" in run_cli(home, "report", "--experiment", name).stdout
    assert train_json(home, *args) == result, "the rerun executes nothing: no judge call, no attempt"


def test_an_error_after_the_request_is_recorded_as_an_error_and_the_next_call_says_why(stores):
    trajectory, experiment = sample_trajectory(), _experiment()
    key = f"{experiment}:{trajectory.content_hash}:{RUBRIC.content_hash}:test"

    def failing() -> Verdict:
        raise JudgeUnavailable("502 from the judge API")

    with pytest.raises(JudgeUnavailable):
        stores.verdicts.judge_once(key, experiment, trajectory.trial_id, failing, timeout_s=5)
    assert _calls(stores.db, experiment) == [("error", False, None, "JudgeUnavailable: 502 from the judge API")]

    verdict, hit = stores.verdicts.judge_once(
        key, experiment, trajectory.trial_id, lambda: simulated_judge(trajectory, RUBRIC), timeout_s=5
    )
    assert not hit and verdict == simulated_judge(trajectory, RUBRIC)
    assert [(s, c) for s, _, c, _ in _calls(stores.db, experiment)] == [("error", None), ("done", ERROR)]
    billing = stores.verdicts.billing(experiment)
    assert billing["extra_calls"] == 1 and billing["extra_call_causes"] == {ERROR: 1}
    assert billing["outcomes"] == {ERROR: 1, ANSWERED: 1}


TIMING_OUT_PROCESS = """
import sys, time
from rl_assets.stores.database import Database
from rl_assets.stores.verdicts import JudgeTimeout, VerdictLedger
def hangs():
    time.sleep(600)  # the judge never answers while this process lives
try:
    VerdictLedger(Database.from_env()).judge_once(sys.argv[1], sys.argv[2], "t", hangs, timeout_s=0.3)
except JudgeTimeout:
    print("timed out", flush=True)
"""


def test_a_timed_out_call_whose_process_ended_is_counted_with_cause_timeout(stores):
    """Its late answer can no longer come: the next call pays, and the report says it was for a timeout."""
    trajectory, experiment = sample_trajectory(), _experiment()
    key = f"{experiment}:{trajectory.content_hash}:{RUBRIC.content_hash}:test"
    proc = subprocess.run(
        [sys.executable, "-c", TIMING_OUT_PROCESS, key, experiment], capture_output=True, text=True, env=os.environ
    )
    assert proc.returncode == 0 and proc.stdout == "timed out\n", proc.stderr[-2000:]
    verdict, hit = stores.verdicts.judge_once(
        key, experiment, trajectory.trial_id, lambda: simulated_judge(trajectory, RUBRIC), timeout_s=5
    )
    assert not hit and verdict == simulated_judge(trajectory, RUBRIC)
    assert [(s, t, c) for s, t, c, _ in _calls(stores.db, experiment)] == [
        ("timed_out", True, None),
        ("done", False, TIMEOUT),
    ]
    billing = stores.verdicts.billing(experiment)
    assert billing["extra_call_causes"] == {TIMEOUT: 1} and billing["outcomes"] == {TIMEOUT: 1, ANSWERED: 1}


KILLED_PROCESS = """
import os, signal, sys
from rl_assets.stores.database import Database
from rl_assets.stores.verdicts import VerdictLedger
def call():
    os.kill(os.getpid(), signal.SIGKILL)  # the process dies after the paid call started
VerdictLedger(Database.from_env()).judge_once(sys.argv[1], sys.argv[2], "t", call, timeout_s=30)
"""


def test_a_call_in_flight_is_in_flight_and_a_killed_one_is_process_died(stores):
    """A ``claimed`` row is told apart by its key's lock: held while the call runs, gone with a dead process."""
    trajectory, experiment = sample_trajectory(), _experiment()
    key = f"{experiment}:{trajectory.content_hash}:{RUBRIC.content_hash}:test"
    proc = subprocess.run([sys.executable, "-c", KILLED_PROCESS, key, experiment], env=os.environ)
    assert proc.returncode == -signal.SIGKILL
    # Its lock goes when its Postgres backend sees the connection close, a moment after the kill.
    wait_for(lambda: stores.verdicts.billing(experiment)["outcomes"] == {DIED: 1}, "the dead claim to be unlocked")

    release = threading.Event()

    def slow() -> Verdict:
        release.wait(60)
        return simulated_judge(trajectory, RUBRIC)

    other = VerdictLedger(Database(PostgresInfo.from_env()))  # another process's connection, in a thread
    judging = threading.Thread(target=other.judge_once, args=(key, experiment, trajectory.trial_id, slow))
    judging.start()
    wait_for(lambda: len(_calls(stores.db, experiment)) == 2, "the second call to be claimed")
    assert stores.verdicts.billing(experiment)["outcomes"] == {DIED: 1, IN_FLIGHT: 1}
    release.set()
    judging.join(timeout=60)
    other.db.close()
    billing = stores.verdicts.billing(experiment)
    assert billing["outcomes"] == {DIED: 1, ANSWERED: 1} and billing["extra_call_causes"] == {DIED: 1}


def test_two_writers_of_one_key_both_return_the_stored_verdict(stores):
    """Two answers recorded for one key at once (two calls that overlapped): one is stored, and both writers
    return it; the other call is marked as a duplicate."""
    experiment = _experiment()
    key = f"{experiment}:race"
    answers = [simulated_judge(sample_trajectory(), RUBRIC), simulated_judge(sample_trajectory(), RUBRIC)]
    assert answers[0] != answers[1]
    ledgers = [VerdictLedger(Database(PostgresInfo.from_env())) for _ in answers]
    call_ids = [ledger.claim(key, experiment, "t", None) for ledger in ledgers]
    gate, returned = threading.Barrier(2), [None, None]

    def write(i: int) -> None:
        gate.wait()
        returned[i] = ledgers[i].record(key, call_ids[i], answers[i])

    writers = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=60)
    stored = stores.verdicts.get(key)
    assert stored in answers and returned == [stored, stored]
    assert sorted(s for s, _, _, _ in _calls(stores.db, experiment)) == ["done", "duplicate"]
    assert stores.verdicts.billing(experiment)["outcomes"] == {ANSWERED: 1, DUPLICATE: 1}
    for ledger in ledgers:
        ledger.db.close()


def test_a_call_that_times_out_and_then_fails_is_a_timeout_and_the_retry_pays_once_more(stores):
    """The retry waits for the abandoned call; when it fails instead of answering, the retry pays, for a timeout."""
    trajectory, experiment = sample_trajectory(), _experiment()
    key = f"{experiment}:{trajectory.content_hash}:{RUBRIC.content_hash}:test"
    failing_late = threading.Event()

    def fails_late() -> Verdict:
        failing_late.wait(60)
        raise JudgeUnavailable("connection reset after the request was sent")

    with pytest.raises(JudgeTimeout):
        stores.verdicts.judge_once(key, experiment, trajectory.trial_id, fails_late, timeout_s=0.2)
    failing_late.set()
    verdict, hit = stores.verdicts.judge_once(
        key, experiment, trajectory.trial_id, lambda: simulated_judge(trajectory, RUBRIC), timeout_s=30
    )
    assert not hit and verdict == simulated_judge(trajectory, RUBRIC)
    assert _calls(stores.db, experiment) == [
        ("error", True, None, "JudgeUnavailable: connection reset after the request was sent"),
        ("done", False, TIMEOUT, None),
    ]
    assert stores.verdicts.billing(experiment)["outcomes"] == {TIMEOUT: 1, ANSWERED: 1}
