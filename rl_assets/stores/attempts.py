"""Attempt logs: one row per generation attempt and per judging attempt.

These are the durable evidence behind the ``counts`` of ``train --json`` and
of ``report``: how often a trial's rollout was actually executed, how often it
failed, how often judging ran and whether it hit the verdict cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rl_assets.stores.database import Database


@dataclass(frozen=True)
class AttemptTally:
    """An experiment's attempts of one kind: trials that succeeded first try, trials retried, attempts in all."""

    succeeded_first_try: int
    attempts: int
    retried: list[str]


class AttemptLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    def start_generation(self, experiment: str, trial_id: str, attempt: int, identity: str, fork_kind: str) -> int:
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_generation_attempts (experiment, trial_id, attempt, identity, outcome, fork_kind) "
                "VALUES (%s, %s, %s, %s, 'running', %s) RETURNING id",
                (experiment, trial_id, attempt, identity, fork_kind),
            )
            return cur.fetchone()[0]

    def finish_generation(self, attempt_id: int, outcome: str, error: str | None = None) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE rl_generation_attempts SET outcome = %s, error = %s, finished_at = now() WHERE id = %s",
                (outcome, error, attempt_id),
            )

    def settle_cut_off(self, experiment: str, trial_id: str, identity: str) -> None:
        """Call ok a trial's attempts of ``identity`` that are still running: a kill landed after one stored its
        rollout and before it was called ok. Its rollout is the one reused, so its calls were not wasted and
        are not paid again (:meth:`~rl_assets.stores.model_calls.ModelCallLedger.wasted_calls`)."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE rl_generation_attempts SET outcome = 'ok', finished_at = now() "
                "WHERE experiment = %s AND trial_id = %s AND identity = %s AND outcome = 'running'",
                (experiment, trial_id, identity),
            )

    def record_judging(
        self, experiment: str, trial_id: str, attempt: int, key: str, cache_hit: bool | None, outcome: str
    ) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_judge_attempts (experiment, trial_id, attempt, verdict_key, cache_hit, outcome) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (experiment, trial_id, attempt, key, cache_hit, outcome),
            )

    def trials_judged_with(self, verdict_key: str) -> list[str]:
        """The trials whose judging used ``verdict_key``."""
        with self.db.transaction() as cur:
            cur.execute("SELECT DISTINCT trial_id FROM rl_judge_attempts WHERE verdict_key = %s", (verdict_key,))
            return sorted(row[0] for row in cur.fetchall())

    def generation_tally(self, experiment: str) -> AttemptTally:
        """How the experiment's rollouts went: trials right first time, the retried ones, all attempts."""
        return self._tally("rl_generation_attempts", experiment)

    def judging_tally(self, experiment: str) -> AttemptTally:
        """How the experiment's judgments went, as :meth:`generation_tally`."""
        return self._tally("rl_judge_attempts", experiment)

    def _tally(self, table: str, experiment: str) -> AttemptTally:
        """Counted in Postgres: a long experiment's million attempts come back as three numbers and the retries."""
        with self.db.transaction() as cur:
            cur.execute(
                "WITH per_trial AS (SELECT trial_id, count(*) AS n, count(*) FILTER (WHERE outcome = 'failed') AS f "
                f"FROM {table} WHERE experiment = %s GROUP BY trial_id) "  # table: one of two literals above
                "SELECT count(*) FILTER (WHERE f = 0), coalesce(sum(n), 0), "
                "coalesce(array_agg(trial_id ORDER BY trial_id) FILTER (WHERE f > 0), '{}') FROM per_trial",
                (experiment,),
            )
            first_try, attempts, retried = cur.fetchone()
            return AttemptTally(first_try, int(attempts), retried)

    def record_trial_failure(self, experiment: str, trial_id: str, phase: str, error: str) -> None:
        """Mark a trial failed for good: its step trains without it."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_trial_failures (experiment, trial_id, phase, error) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (experiment, trial_id) DO NOTHING",
                (experiment, trial_id, phase, error[:4000]),
            )

    def failed_trials(self, experiment: str, steps: Iterable[int] | None = None) -> dict[str, str]:
        """trial id -> ``"phase: error"`` of every trial that failed for good (of ``steps`` only, if given)."""
        with self.db.transaction() as cur:
            if steps is None:
                cur.execute("SELECT trial_id, phase, error FROM rl_trial_failures WHERE experiment = %s", (experiment,))
            else:  # trial ids are s<step>-<slot>
                patterns = [f"s{s}-%" for s in steps]
                if not patterns:
                    return {}
                cur.execute(
                    "SELECT trial_id, phase, error FROM rl_trial_failures WHERE experiment = %s "
                    "AND trial_id LIKE ANY(%s)",
                    (experiment, patterns),
                )
            return {t: f"{phase}: {error}" for t, phase, error in cur.fetchall()}

    def record_driver_attempt(self, experiment: str, pid: int) -> int:
        """Record that the driver process ``pid`` drives ``experiment`` (once per pid); its attempt number."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_driver_attempts (experiment, pid) SELECT %s, %s WHERE NOT EXISTS "
                "(SELECT 1 FROM rl_driver_attempts WHERE experiment = %s AND pid = %s)",
                (experiment, pid, experiment, pid),
            )
            cur.execute(
                "SELECT count(*) FROM rl_driver_attempts WHERE experiment = %s AND started_at <= "
                "(SELECT max(started_at) FROM rl_driver_attempts WHERE experiment = %s AND pid = %s)",
                (experiment, experiment, pid),
            )
            return cur.fetchone()[0]

    def counts(self, experiment: str) -> dict[str, int]:
        """Every count of ``train --json``, read from the durable records."""
        queries = {
            "generate_attempts": "SELECT count(*) FROM rl_generation_attempts WHERE experiment = %s",
            "generate_failures": (
                "SELECT count(*) FROM rl_generation_attempts WHERE experiment = %s AND outcome = 'failed'"
            ),
            "judge_calls": "SELECT count(*) FROM rl_judge_calls WHERE experiment = %s",
            "judge_attempts": "SELECT count(*) FROM rl_judge_attempts WHERE experiment = %s",
            "train_applications": "SELECT count(*) FROM rl_train_ledger WHERE experiment = %s",
            "driver_attempts": "SELECT count(*) FROM rl_driver_attempts WHERE experiment = %s",
        }
        return {name: int(self.db.scalar(sql, (experiment,))) for name, sql in queries.items()}
