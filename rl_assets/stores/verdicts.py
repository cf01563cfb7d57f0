"""The judge ledger: every verdict durably, keyed by what was judged and how.

A verdict's key is ``trajectory hash : rubric hash : judge id``. The protocol
makes a paid call happen at most once per key whatever crashes, and records
every call that was made with what became of it:

1. a recorded verdict is returned without calling (a cache hit);
2. otherwise the caller takes the key's verdict lock (a session-level
   advisory lock on a connection of its own, see :mod:`rl_assets.stores.locks`),
   so no two calls for one key are in flight at once; re-checks; writes a
   ``claimed`` row to ``rl_judge_calls`` and commits it *before* the call;
3. the call runs in a thread of its own. When it answers, the verdict (with
   the id of the call that produced it) and the call's status are written in
   one transaction; ``ON CONFLICT`` keeps a verdict already stored, and every
   writer returns the *stored* verdict, so all agree on one answer.

What a call's row says (``status``, and ``timed_out_at`` once its caller
stopped waiting):

- ``done``: its answer is the stored verdict; with ``timed_out_at`` set, the
  answer came after a timeout and was recorded and used all the same;
- ``timed_out``: its caller gave up and no answer came (or has come yet);
- ``error``: the call raised after the request was sent (counted as billed);
- ``malformed``: the judge answered (billed) with no usable verdict (:class:`MalformedVerdict`);
- ``duplicate``: it answered, but another call's verdict was stored first;
- ``claimed`` with its key's lock free: the process died during the call.

A timed-out call cannot be stopped (a thread cannot be killed) and may still
answer, already paid for. Its caller therefore hands the key's lock over to
the call's thread, which records the late answer and only then releases the
lock; the next attempt waits for the lock (at most its own timeout, billing
nothing while it waits) and then finds the verdict, so a late answer is used,
not paid for again. The thread is a daemon: a call that never returns cannot
keep its process alive, and when the process ends its lock goes with its
connection; the next call is then counted with cause ``timeout``.

A call made because an earlier one left no usable verdict records why in its
``cause``: the earlier call's outcome (``timeout``, ``error``, ``process died
during the call``), or ``verdict damaged`` when the stored row was modified
behind the system's back (such a row is never used: it is deleted and the
judge called again). ``rl-assets report`` groups the extra calls by cause.

Postgres restarts: the claim and the record are transactions, and the record
is retried on a new connection; a lock whose connection the restart dropped
is gone, and releasing it is not an error, so a verdict stored across a
restart is the step's result. From the restart until the call ends, though,
the key's lock is free: a second caller *could* claim the key then, and its
call would be counted, with cause ``process died during the call``. Nothing
in rl-assets judges one key from two processes at once, so this window is one
in principle only.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from rl_assets.domain.models import MalformedVerdict, Verdict
from rl_assets.stores.database import RECONNECTING, TRANSIENT_DB_ERRORS, Database
from rl_assets.stores.locks import IdleConnections, LockKey, LockSpace, SessionLock, hashed, is_held

ANSWERED = "answered"
LATE_ANSWER_USED = "timeout, late answer used"
TIMEOUT = "timeout"
ERROR = "error"
MALFORMED = "malformed verdict"
"""The judge answered, and was billed, but its answer holds no usable verdict."""
DUPLICATE = "answered, another call's verdict kept"
DIED = "process died during the call"
IN_FLIGHT = "in flight"
DAMAGED = "verdict damaged"
MISSING = "verdict missing"
"""The cause of a call made although an earlier one had recorded its verdict, which then vanished."""

ERROR_CHARS = 500
T = TypeVar("T")


class CorruptVerdictError(RuntimeError):
    """A recorded verdict no longer matches its content hash."""


class JudgeTimeout(RuntimeError):
    """The judge did not answer in time (the call may still have been billed, and may still answer)."""


def verdict_key(trajectory_hash: str, rubric_hash: str, judge_id: str) -> str:
    return f"{trajectory_hash}:{rubric_hash}:{judge_id}"


def call_outcome(status: str, timed_out: bool, in_flight: bool) -> str:
    """What became of one call, from its row; ``in_flight``: a ``claimed`` call whose key's lock is held."""
    if status == "done":
        return LATE_ANSWER_USED if timed_out else ANSWERED
    if timed_out:
        return TIMEOUT
    if status == "error":
        return ERROR
    if status == "malformed":
        return MALFORMED
    if status == "duplicate":
        return DUPLICATE
    return IN_FLIGHT if in_flight else DIED


def recall_cause(status: str, timed_out: bool) -> str:
    """Why a call was made after the one described by ``(status, timed_out)``, which is no longer in flight."""
    if status in ("done", "duplicate"):
        return MISSING  # it recorded a verdict, which is gone (``verdict damaged`` is known when it is deleted)
    return call_outcome(status, timed_out, in_flight=False)


def verdict_lock(key: str) -> LockKey:
    """The lock of a verdict key; two keys sharing a hash only take turns, which is harmless."""
    return hashed(LockSpace.VERDICT, key)


def _parse(key: str, body: object, digest: str) -> Verdict:
    try:
        verdict = Verdict.model_validate(body)
    except ValueError as err:
        raise CorruptVerdictError(f"verdict {key} is not a valid verdict: {err}") from None
    if verdict.content_hash != digest:
        raise CorruptVerdictError(f"verdict {key} does not match its recorded hash")
    return verdict


def _retrying(write: Callable[[], T]) -> T:
    """``write`` (an idempotent transaction), again on a new connection if Postgres went away during it."""
    # Database.transaction() itself waits for a restarting server: what outlasts this wait too is a longer outage
    return RECONNECTING.retrying(write, TRANSIENT_DB_ERRORS)


class _PendingCall:
    """One paid call, in a daemon thread, so that its caller can stop waiting without losing its answer."""

    def __init__(
        self, ledger: VerdictLedger, key: str, call_id: int, call: Callable[[], Verdict], lock: SessionLock
    ) -> None:
        self.ledger, self.key, self.call_id, self.lock = ledger, key, call_id, lock
        self.abandoned = False
        """Set once the caller gave up: from then on the lock, and recording the answer, are the thread's."""
        self._outcome: Verdict | BaseException | None = None
        self._answered = threading.Event()
        self._mutex = threading.Lock()
        threading.Thread(target=self._run, args=(call,), daemon=True, name=f"judge-call-{call_id}").start()

    def _run(self, call: Callable[[], Verdict]) -> None:
        try:
            outcome: Verdict | BaseException = call()
        except BaseException as err:  # whatever the call raised is its outcome, to be recorded
            outcome = err
        with self._mutex:
            self._outcome = outcome
            self._answered.set()
            if not self.abandoned:
                return  # the caller is still waiting; it records the outcome
        db = Database(self.ledger.db.info)  # a connection of this thread's own: the caller's may be in use
        try:
            VerdictLedger(db).record(self.key, self.call_id, outcome)
        except BaseException as err:
            if err is not outcome:
                raise  # the record itself failed: the claim stays ``timed_out``, which is what the ledger knows
            # else the call's own error, now recorded: there is no caller left to raise it to
        finally:
            db.close()
            self.lock.release()

    def wait(self, timeout_s: float | None) -> Verdict:
        """The stored verdict once the call answers; after ``timeout_s``, JudgeTimeout, handing the call over."""
        self._answered.wait(timeout_s)
        with self._mutex:
            if not self._answered.is_set():
                self.abandoned = True
                self.ledger.timed_out(self.call_id)  # under the mutex: a late answer is recorded after this
                raise JudgeTimeout(f"judge did not answer within {timeout_s:g}s")
        assert self._outcome is not None
        return self.ledger.record(self.key, self.call_id, self._outcome)


class VerdictLedger:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock_connections = IdleConnections(db.info)

    def get(self, key: str) -> Verdict | None:
        """The recorded verdict, or None; raises :class:`CorruptVerdictError` if it was modified."""
        with self.db.transaction() as cur:
            cur.execute("SELECT verdict, content_hash FROM rl_verdicts WHERE verdict_key = %s", (key,))
            row = cur.fetchone()
        return None if row is None else _parse(key, *row)

    def _usable(self, key: str) -> tuple[Verdict | None, str | None]:
        """``(verdict, None)``, or ``(None, cause)`` after removing a damaged row."""
        try:
            return self.get(key), None
        except CorruptVerdictError:
            with self.db.transaction() as cur:
                cur.execute("DELETE FROM rl_verdicts WHERE verdict_key = %s", (key,))
            return None, DAMAGED

    def keys(self, key_prefix: str) -> list[str]:
        """Every recorded verdict key under ``key_prefix`` (intact or not), sorted."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT verdict_key FROM rl_verdicts WHERE starts_with(verdict_key, %s) ORDER BY verdict_key",
                (key_prefix,),
            )
            return [row[0] for row in cur.fetchall()]

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
        timeout_s: float | None = None,
    ) -> tuple[Verdict, bool]:
        """The verdict for ``key``, calling ``call`` only if none is recorded.

        ``reserve`` (a rate limit's slot) runs once a call is certain, before
        it is claimed: a reservation that fails leaves no claim, since nothing
        was billed. ``timeout_s`` bounds the call, and also the wait for an
        earlier call of the same key still in flight (during which nothing is
        billed). Returns ``(verdict, cache_hit)``.
        """
        cached, cause = self._usable(key)
        if cached is not None:
            return cached, True
        lock = SessionLock(self.db.info, verdict_lock(key), self._lock_connections)
        if not lock.acquire(timeout_s):
            raise JudgeTimeout(f"an earlier call for this verdict was still running after {timeout_s:g}s")
        pending: _PendingCall | None = None
        try:
            cached, cause_now = self._usable(key)
            if cached is not None:
                return cached, True
            if reserve is not None:
                reserve()
            call_id = self.claim(key, experiment, trial_id, cause or cause_now)
            pending = _PendingCall(self, key, call_id, call, lock)
            return pending.wait(timeout_s), False
        finally:
            if pending is None or not pending.abandoned:
                lock.release()

    def claim(self, key: str, experiment: str, trial_id: str, damaged: str | None) -> int:
        """Record a call about to be made, and why if an earlier call was made; under the key's lock."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT status, timed_out_at IS NOT NULL FROM rl_judge_calls WHERE verdict_key = %s "
                "ORDER BY id DESC LIMIT 1",
                (key,),
            )
            last = cur.fetchone()
            # Under the key's lock, the last call is not in flight: its outcome is final.
            cause = damaged if damaged is not None or last is None else recall_cause(*last)
            cur.execute(
                "INSERT INTO rl_judge_calls (verdict_key, experiment, trial_id, status, cause) "
                "VALUES (%s, %s, %s, 'claimed', %s) RETURNING id",
                (key, experiment, trial_id, cause),
            )
            return cur.fetchone()[0]

    def timed_out(self, call_id: int) -> None:
        """Record that the call's caller stopped waiting; a call that has answered keeps its status."""

        def write() -> None:
            with self.db.transaction() as cur:
                cur.execute(
                    "UPDATE rl_judge_calls SET timed_out_at = now(), "
                    "status = CASE WHEN status = 'claimed' THEN 'timed_out' ELSE status END WHERE id = %s",
                    (call_id,),
                )

        _retrying(write)

    def record(self, key: str, call_id: int, outcome: Verdict | BaseException) -> Verdict:
        """Record what call ``call_id`` returned: the *stored* verdict, whoever wrote it, or its error raised.

        Idempotent (the stored verdict names the call that wrote it), so it is
        run again if Postgres restarts in the middle of it.
        """
        if isinstance(outcome, BaseException):
            error = f"{type(outcome).__name__}: {outcome}"[:ERROR_CHARS]
            status = "malformed" if isinstance(outcome, MalformedVerdict) else "error"

            def write_error() -> None:
                with self.db.transaction() as cur:
                    cur.execute(
                        "UPDATE rl_judge_calls SET status = %s, error = %s, finished_at = now() WHERE id = %s",
                        (status, error, call_id),
                    )

            _retrying(write_error)
            raise outcome

        def write() -> tuple[object, str]:
            with self.db.transaction() as cur:
                cur.execute(
                    "INSERT INTO rl_verdicts (verdict_key, verdict, content_hash, call_id) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (verdict_key) DO NOTHING",
                    (key, outcome.model_dump_json(), outcome.content_hash, call_id),
                )
                cur.execute("SELECT verdict, content_hash, call_id FROM rl_verdicts WHERE verdict_key = %s", (key,))
                body, digest, writer = cur.fetchone()
                cur.execute(
                    "UPDATE rl_judge_calls SET status = %s, finished_at = now() WHERE id = %s",
                    ("done" if writer == call_id else "duplicate", call_id),
                )
            return body, digest

        return _parse(key, *_retrying(write))

    def malformed_calls(self, key: str) -> int:
        """Calls of ``key`` the judge answered with no usable verdict: what its own retry budget counts."""
        with self.db.transaction() as cur:
            cur.execute("SELECT count(*) FROM rl_judge_calls WHERE verdict_key = %s AND status = 'malformed'", (key,))
            return cur.fetchone()[0]

    def billing(self, experiment: str) -> dict[str, Any]:
        """The paid calls of ``experiment``: how many, for how many verdicts, what became of each, why each extra.

        An extra call is any call of a key after its first. Its cause is the
        one recorded when it was claimed, or for rows older than that column's
        use, what became of the call before it.
        """
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT verdict_key, status, timed_out_at IS NOT NULL, cause FROM rl_judge_calls "
                "WHERE experiment = %s ORDER BY id",
                (experiment,),
            )
            rows = cur.fetchall()
            newest = {key: i for i, (key, _, _, _) in enumerate(rows)}
            # Only a key's newest call can be in flight: each call was claimed after the one before it ended.
            in_flight = {i for key, i in newest.items() if rows[i][1] == "claimed" and is_held(cur, verdict_lock(key))}
        outcomes: Counter[str] = Counter()
        causes: Counter[str] = Counter()
        last: dict[str, tuple[str, bool]] = {}
        for i, (key, status, timed_out, cause) in enumerate(rows):
            outcomes[call_outcome(status, timed_out, i in in_flight)] += 1
            if key in last:
                causes[cause or recall_cause(*last[key])] += 1
            last[key] = (status, timed_out)
        return {
            "calls": len(rows),
            "verdicts": len(last),
            "extra_calls": len(rows) - len(last),
            "extra_call_causes": dict(causes),
            "outcomes": dict(outcomes),
        }
