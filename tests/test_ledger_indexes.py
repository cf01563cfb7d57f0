"""Every lookup a trial, a judge call, a training step or ``status`` makes in the ledgers is served by an index.

A sequential scan reads the whole home's history: at a million trials, every judge call's claim would read a
million rows. Each statement below is the one its store method runs (named beside it), explained with
sequential scans priced out of the planner's reach: with an index the plan uses it, without one Postgres still
scans, so the assertion fails exactly when a lookup has no index, whatever the tables hold.
"""

from __future__ import annotations

import pytest

LOOKUPS = {
    "VerdictLedger.claim": (
        "SELECT status, timed_out_at IS NOT NULL FROM rl_judge_calls WHERE verdict_key = 'k' ORDER BY id DESC LIMIT 1"
    ),
    "VerdictLedger.billing": (
        "SELECT verdict_key, status, timed_out_at IS NOT NULL, cause FROM rl_judge_calls "
        "WHERE experiment = 'e' ORDER BY id"
    ),
    "AttemptLog.trials_judged_with": "SELECT DISTINCT trial_id FROM rl_judge_attempts WHERE verdict_key = 'k'",
    "AttemptLog.counts (generation)": "SELECT count(*) FROM rl_generation_attempts WHERE experiment = 'e'",
    "AttemptLog.counts (judging)": "SELECT count(*) FROM rl_judge_attempts WHERE experiment = 'e'",
    "AttemptLog.counts (judge calls)": "SELECT count(*) FROM rl_judge_calls WHERE experiment = 'e'",
    "AttemptLog.counts (driver)": "SELECT count(*) FROM rl_driver_attempts WHERE experiment = 'e'",
    "AttemptLog.generation_tally": (
        "SELECT trial_id, count(*) FROM rl_generation_attempts WHERE experiment = 'e' GROUP BY trial_id"
    ),
    "ModelCallLedger.usage (a step)": (
        "SELECT role, model, count(*) FROM rl_model_calls WHERE experiment = 'e' AND trial_id LIKE 's3-%' "
        "GROUP BY role, model"
    ),
    "TrainingLedger.summaries": "SELECT * FROM rl_step_summaries WHERE experiment = 'e' AND rubric = 'v1'",
    "ProgressNotes.get": "SELECT line FROM rl_progress WHERE experiment = 'e' AND rubric = 'v1'",
}


@pytest.mark.parametrize("lookup", sorted(LOOKUPS))
def test_the_lookup_reads_an_index_not_the_history(stores, lookup):
    stores.db.scalar("SELECT 1")  # the ledger tables at head: migrated on the pool's first use
    conn = stores.db.info.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET enable_seqscan = off")
            cur.execute("EXPLAIN " + LOOKUPS[lookup])
            plan = "\n".join(row[0] for row in cur.fetchall())
    finally:
        conn.close()
    assert "Seq Scan" not in plan, f"{lookup} scans its table:\n{plan}"
