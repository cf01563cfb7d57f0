"""The judge ledger, against the real Postgres: a verdict is paid for once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid

from rl_assets.domain.scoring import simulated_judge
from rl_assets.home.services.postgres import PostgresInfo
from rl_assets.stores.database import Database
from rl_assets.stores.verdicts import DIED, VerdictLedger
from rl_assets_testkit.samples import RUBRIC, sample_trajectory


def _calls(db: Database, key: str) -> list[str]:
    with db.transaction() as cur:
        cur.execute("SELECT status FROM rl_judge_calls WHERE verdict_key = %s ORDER BY id", (key,))
        return [r[0] for r in cur.fetchall()]


def test_a_recorded_verdict_is_never_paid_again(stores):
    trajectory = sample_trajectory(uuid.uuid4().hex)
    key = f"{trajectory.content_hash}:{RUBRIC.content_hash}:test"
    paid = []

    def call():
        paid.append(1)
        return simulated_judge(trajectory, RUBRIC)

    first, hit1 = stores.verdicts.judge_once(key, "ledger-test", trajectory.trial_id, call)
    second, hit2 = stores.verdicts.judge_once(key, "ledger-test", trajectory.trial_id, call)
    assert (hit1, hit2) == (False, True)
    assert first == second and len(paid) == 1
    assert _calls(stores.db, key) == ["done"]


def test_concurrent_judges_of_the_same_trajectory_pay_once(stores):
    trajectory = sample_trajectory(uuid.uuid4().hex)
    key = f"{trajectory.content_hash}:{RUBRIC.content_hash}:test"
    paid, results = [], []
    gate = threading.Barrier(4)

    def worker():
        ledger = VerdictLedger(Database(PostgresInfo.from_env()))  # own connection, like another process

        def call():
            paid.append(1)
            return simulated_judge(trajectory, RUBRIC)

        gate.wait()
        results.append(ledger.judge_once(key, "ledger-test", trajectory.trial_id, call))
        ledger.db.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(paid) == 1
    assert sorted(hit for _, hit in results) == [False, True, True, True]
    assert len({v for v, _ in results}) == 1


CRASHING_JUDGE = """
import os, sys, signal
from rl_assets.stores.database import Database
from rl_assets.stores.verdicts import VerdictLedger
def call():
    print("calling", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the process dies after the paid call started
VerdictLedger(Database.from_env()).judge_once(sys.argv[1], "ledger-test", "t", call)
"""


def test_a_crash_during_the_call_is_counted_and_the_next_attempt_pays_again(stores):
    trajectory = sample_trajectory(uuid.uuid4().hex)
    key = f"{trajectory.content_hash}:{RUBRIC.content_hash}:test"
    proc = subprocess.run([sys.executable, "-c", CRASHING_JUDGE, key], capture_output=True, text=True, env=os.environ)
    assert proc.returncode == -signal.SIGKILL and "calling" in proc.stdout
    assert _calls(stores.db, key) == ["claimed"], "the claim was durable before the call"
    verdict, hit = stores.verdicts.judge_once(
        key, "ledger-test", trajectory.trial_id, lambda: simulated_judge(trajectory, RUBRIC)
    )
    assert not hit and verdict.score == simulated_judge(trajectory, RUBRIC).score
    assert _calls(stores.db, key) == ["claimed", "done"], "the lost call stays counted"
    with stores.db.transaction() as cur:
        cur.execute("SELECT cause FROM rl_judge_calls WHERE verdict_key = %s ORDER BY id", (key,))
        assert [r[0] for r in cur.fetchall()] == [None, DIED], "the extra call says why it was made"
