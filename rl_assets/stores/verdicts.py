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

Each verdict row carries its content hash. A row modified behind the system's
back is never used: it is deleted and the judge called again, and that call
is marked with its cause (``verdict damaged``) so the report can say why.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from rl_assets.domain.models import Verdict
from rl_assets.stores.database import Database

DAMAGED = "verdict damaged"


class CorruptVerdictError(RuntimeError):
    """A recorded verdict no longer matches its content hash."""


def verdict_key(trajectory_hash: str, rubric_hash: str, judge_id: str) -> str:
    return f"{trajectory_hash}:{rubric_hash}:{judge_id}"


class VerdictLedger:
    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, key: str) -> Verdict | None:
        """The recorded verdict, or None; raises :class:`CorruptVerdictError` if it was modified."""
        with self.db.transaction() as cur:
            cur.execute("SELECT verdict, content_hash FROM rl_verdicts WHERE verdict_key = %s", (key,))
            row = cur.fetchone()
        if row is None:
            return None
        try:
            verdict = Verdict.model_validate(row[0])
        except ValueError as err:
            raise CorruptVerdictError(f"verdict {key} is not a valid verdict: {err}") from None
        if verdict.content_hash != row[1]:
            raise CorruptVerdictError(f"verdict {key} does not match its recorded hash")
        return verdict

    def _usable(self, key: str) -> tuple[Verdict | None, str | None]:
        """``(verdict, None)``, or ``(None, cause)`` after removing a damaged row."""
        try:
            return self.get(key), None
        except CorruptVerdictError:
            with self.db.transaction() as cur:
                cur.execute("DELETE FROM rl_verdicts WHERE verdict_key = %s", (key,))
            return None, DAMAGED

    def damaged_keys(self, key_prefix: str) -> list[str]:
        """Keys under ``key_prefix`` whose verdict no longer matches its hash."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT verdict_key, verdict, content_hash FROM rl_verdicts WHERE starts_with(verdict_key, %s)",
                (key_prefix,),
            )
            rows = cur.fetchall()
        damaged = []
        for key, body, digest in rows:
            try:
                ok = Verdict.model_validate(body).content_hash == digest
            except ValueError:
                ok = False
            if not ok:
                damaged.append(key)
        return damaged

    def judge_once(
        self,
        key: str,
        experiment: str,
        trial_id: str,
        call: Callable[[], Verdict],
        reserve: Callable[[], object] | None = None,
    ) -> tuple[Verdict, bool]:
        """The verdict for ``key``, calling ``call`` only if none is recorded.

        ``reserve`` (a rate limit's slot) runs once a call is certain, before
        it is claimed: a reservation that fails leaves no claim, since nothing
        was billed. Returns ``(verdict, cache_hit)``.
        """
        cached, cause = self._usable(key)
        if cached is not None:
            return cached, True
        conn = self.db.connection()
        lock_id = zlib.crc32(key.encode())
        with conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (lock_id,))
        try:
            cached, cause_now = self._usable(key)
            if cached is not None:
                return cached, True
            cause = cause or cause_now
            if reserve is not None:
                reserve()
            with self.db.transaction() as cur:
                cur.execute(
                    "INSERT INTO rl_judge_calls (verdict_key, experiment, trial_id, status, cause) "
                    "VALUES (%s, %s, %s, 'claimed', %s) RETURNING id",
                    (key, experiment, trial_id, cause),
                )
                call_id = cur.fetchone()[0]
            verdict = call()
            with self.db.transaction() as cur:
                cur.execute(
                    "INSERT INTO rl_verdicts (verdict_key, verdict, content_hash) VALUES (%s, %s, %s) "
                    "ON CONFLICT (verdict_key) DO NOTHING",
                    (key, verdict.model_dump_json(), verdict.content_hash),
                )
                cur.execute(
                    "UPDATE rl_judge_calls SET status = 'done', finished_at = now() WHERE id = %s",
                    (call_id,),
                )
            return verdict, False
        finally:
            with conn, conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", (lock_id,))
