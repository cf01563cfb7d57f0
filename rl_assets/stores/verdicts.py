"""The judge ledger: every verdict durably, keyed by what was judged and how.

A verdict's key is ``trajectory hash : rubric hash : judge id``. The protocol
makes a paid call happen at most once per key whatever crashes:

1. a recorded verdict is returned without calling (a cache hit);
2. otherwise the caller takes a Postgres advisory lock on the key, so two
   processes judging the same thing never both pay; re-checks; writes a
   ``claimed`` row to ``rl_judge_calls`` and commits it *before* the call;
3. after the call, the verdict and the call's ``done`` mark are written in one
   transaction.

A crash between the call returning and step 3 leaves a ``claimed`` row: that
call was billed and its verdict lost, so the next attempt calls again and the
extra call is counted, never hidden.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from rl_assets.domain.models import Verdict
from rl_assets.stores.database import Database


def verdict_key(trajectory_hash: str, rubric_hash: str, judge_id: str) -> str:
    return f"{trajectory_hash}:{rubric_hash}:{judge_id}"


class VerdictLedger:
    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, key: str) -> Verdict | None:
        with self.db.transaction() as cur:
            cur.execute("SELECT verdict FROM rl_verdicts WHERE verdict_key = %s", (key,))
            row = cur.fetchone()
        return None if row is None else Verdict.model_validate(row[0])

    def judge_once(self, key: str, experiment: str, trial_id: str, call: Callable[[], Verdict]) -> tuple[Verdict, bool]:
        """The verdict for ``key``, calling ``call`` only if none is recorded.

        Returns ``(verdict, cache_hit)``.
        """
        cached = self.get(key)
        if cached is not None:
            return cached, True
        conn = self.db.connection()
        lock_id = zlib.crc32(key.encode())
        with conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (lock_id,))
        try:
            cached = self.get(key)
            if cached is not None:
                return cached, True
            with self.db.transaction() as cur:
                cur.execute(
                    "INSERT INTO rl_judge_calls (verdict_key, experiment, trial_id, status) "
                    "VALUES (%s, %s, %s, 'claimed') RETURNING id",
                    (key, experiment, trial_id),
                )
                call_id = cur.fetchone()[0]
            verdict = call()
            with self.db.transaction() as cur:
                cur.execute(
                    "INSERT INTO rl_verdicts (verdict_key, verdict) VALUES (%s, %s) "
                    "ON CONFLICT (verdict_key) DO NOTHING",
                    (key, verdict.model_dump_json()),
                )
                cur.execute(
                    "UPDATE rl_judge_calls SET status = 'done', finished_at = now() WHERE id = %s",
                    (call_id,),
                )
            return verdict, False
        finally:
            with conn, conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", (lock_id,))
