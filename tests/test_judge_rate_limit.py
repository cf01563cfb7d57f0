"""The judge's per-minute limit, against the real Postgres: shared by processes, never exceeded, never billed.

Pools bound concurrent judge calls; this bounds their rate. The window is shortened here (1 s) so that
several windows pass in a test; the resource uses 60 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from rl_assets.driver.deployment import JUDGE_RATE_ENV, judge_max_calls_per_minute
from rl_assets.resources.judge import JudgeResource
from rl_assets.stores.database import Database
from rl_assets.stores.judge_rate import JudgeRateLimit, JudgeRateTimeout
from rl_assets_testkit.samples import RUBRIC, sample_trajectory

TAKE_SLOTS = """
import sys
from rl_assets.stores.database import Database
from rl_assets.stores.judge_rate import JudgeRateLimit
limit = JudgeRateLimit(Database.from_env(), sys.argv[1], max_calls=2, window_s=1.0)
for _ in range(int(sys.argv[2])):
    limit.acquire(timeout_s=60)
"""


def _call_times(db: Database, judge_id: str) -> list[float]:
    with db.transaction() as cur:
        cur.execute(
            "SELECT extract(epoch FROM called_at) FROM rl_judge_rate WHERE judge_id = %s ORDER BY called_at",
            (judge_id,),
        )
        return [float(r[0]) for r in cur.fetchall()]


def _claims(db: Database, trial_id: str) -> list[str]:
    with db.transaction() as cur:
        cur.execute("SELECT status FROM rl_judge_calls WHERE trial_id = %s ORDER BY id", (trial_id,))
        return [r[0] for r in cur.fetchall()]


def test_three_processes_share_one_window_and_never_exceed_it(stores):
    judge_id = f"rate-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen([sys.executable, "-c", TAKE_SLOTS, judge_id, "2"], env=os.environ, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]

    times = _call_times(stores.db, judge_id)
    assert len(times) == 6
    # Sliding window: any three consecutive calls span at least one window (2 per second, never 3).
    spans = [later - earlier for earlier, later in zip(times, times[2:], strict=False)]
    assert min(spans) >= 1.0 - 1e-3, spans
    assert times[-1] - times[0] >= 2.0 - 1e-3, "six calls at two per second need two full windows"


def test_the_judge_resource_waits_for_its_minute_and_leaves_no_claim_when_it_gives_up(stores):
    judge_id = f"rate-{uuid.uuid4().hex[:8]}"
    with stores.db.transaction() as cur:  # a call 59.5 s ago fills a one-per-minute window for 0.5 s more
        cur.execute(
            "INSERT INTO rl_judge_rate (judge_id, called_at) VALUES (%s, clock_timestamp() - interval '59.5 seconds')",
            (judge_id,),
        )

    impatient = JudgeResource(judge_id=judge_id, max_calls_per_minute=1, rate_wait_s=0.1)
    refused = sample_trajectory()
    with pytest.raises(JudgeRateTimeout, match="allows 1 calls per 60 s"):
        impatient.judge(stores.verdicts, refused, RUBRIC, "rate-test", latency_s=0, timeout_s=10)
    assert _claims(stores.db, refused.trial_id) == [], "nothing was billed, so nothing is claimed"

    patient = JudgeResource(judge_id=judge_id, max_calls_per_minute=1)
    judged = sample_trajectory()
    verdict, cache_hit = patient.judge(stores.verdicts, judged, RUBRIC, "rate-test", latency_s=0, timeout_s=10)
    assert not cache_hit and verdict.rubric_name == "v1"
    assert _claims(stores.db, judged.trial_id) == ["done"]
    first, second = _call_times(stores.db, judge_id)
    assert second - first >= 60.0 - 1e-3, "the call waited for the window"

    again, cache_hit = patient.judge(stores.verdicts, judged, RUBRIC, "rate-test", latency_s=0, timeout_s=10)
    assert cache_hit and again == verdict
    assert len(_call_times(stores.db, judge_id)) == 2, "a cache hit takes no slot"


def test_a_limit_is_positive(stores):
    with pytest.raises(ValueError, match="max_calls >= 1"):
        JudgeRateLimit(stores.db, "x", max_calls=0)


@pytest.mark.parametrize("value, expected", [("", None), ("30", 30)])
def test_the_limit_comes_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv(JUDGE_RATE_ENV, value)
    assert judge_max_calls_per_minute() == expected


@pytest.mark.parametrize("value", ["0", "-3", "ten", "2.5"])
def test_a_bad_limit_in_the_environment_is_refused(monkeypatch, value):
    monkeypatch.setenv(JUDGE_RATE_ENV, value)
    with pytest.raises(ValueError, match=JUDGE_RATE_ENV):
        judge_max_calls_per_minute()
