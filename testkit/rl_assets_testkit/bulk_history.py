"""Rows of a synthetic history, written in bulk: what scale tests and benchmarks build a long experiment from.

Only :mod:`rl_assets_testkit.history` writes here. It hands over runs already serialized by Dagster, so this
module knows Dagster's run and event tables by their columns alone (``runs``, ``run_tags``, ``event_logs``)
and imports no Dagster; the rows are those Dagster itself writes for a run and a materialization.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from psycopg2.extras import execute_values

from rl_assets.stores.database import Database

BATCH = 5_000
"""Rows a statement: bounded memory at a million runs."""


@dataclass(frozen=True)
class RunRow:
    run_id: str
    job: str
    status: str
    body: str
    """The run as Dagster serializes it: its tags are read from here as well as from ``run_tags``."""
    partition: str
    tags: dict[str, str]


class BulkHistory:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add_runs(self, runs: list[RunRow], at: float) -> None:
        """Insert finished (or created) runs, stamped at unix time ``at``."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
        with self.db.transaction() as cur:
            execute_values(
                cur,
                "INSERT INTO runs (run_id, pipeline_name, status, run_body, partition, create_timestamp, "
                "update_timestamp, start_time, end_time) VALUES %s",
                [(r.run_id, r.job, r.status, r.body, r.partition, stamp, stamp, at, at) for r in runs],
                page_size=BATCH,
            )
            execute_values(
                cur,
                "INSERT INTO run_tags (run_id, key, value) VALUES %s",
                [(r.run_id, k, v) for r in runs for k, v in r.tags.items()],
                page_size=BATCH,
            )

    def copy_event(self, storage_id: int, partitions: list[str]) -> None:
        """Copies of the event row ``storage_id``, one per partition, with the partition column changed."""
        with self.db.transaction() as cur:
            for i in range(0, len(partitions), BATCH):
                cur.execute(
                    "INSERT INTO event_logs (run_id, event, dagster_event_type, timestamp, step_key, asset_key, "
                    "partition) SELECT run_id, event, dagster_event_type, timestamp, step_key, asset_key, p "
                    "FROM event_logs, unnest(%s::text[]) AS p WHERE id = %s",
                    (partitions[i : i + BATCH], storage_id),
                )

    def copy_event_with_bodies(self, storage_id: int, bodies: dict[str, str]) -> None:
        """Copies of the event row ``storage_id``, one per partition, with the partition and the body changed."""
        items = list(bodies.items())
        with self.db.transaction() as cur:
            for i in range(0, len(items), BATCH):
                batch = items[i : i + BATCH]
                cur.execute(
                    "INSERT INTO event_logs (run_id, event, dagster_event_type, timestamp, step_key, asset_key, "
                    "partition) SELECT run_id, b, dagster_event_type, timestamp, step_key, asset_key, p "
                    "FROM event_logs, unnest(%s::text[], %s::text[]) AS t(p, b) WHERE id = %s",
                    ([p for p, _ in batch], [b for _, b in batch], storage_id),
                )

    def add_ledger_steps(self, experiment: str, rubric: str, steps: int, last_hash: str) -> None:
        """Ledger rows for steps ``0..steps-1``: made-up policy hashes, but the last step's, whose checkpoint exists."""
        hashes = [f"h{s}" for s in range(steps)] + [last_hash]
        rows = [(experiment, rubric, s, f"id{s}", hashes[s], hashes[s + 1], s + 1, 0) for s in range(steps)]
        with self.db.transaction() as cur:
            execute_values(
                cur,
                "INSERT INTO rl_train_ledger (experiment, rubric, step, identity, parent_hash, policy_hash, "
                "version, actor_pid) VALUES %s",
                rows,
                page_size=BATCH,
            )

    def add_summaries(self, experiment: str, rubric: str, steps: int, trials: int) -> None:
        """A summary row for each of steps ``0..steps-1``: every trial ok, reward and turns made up."""
        rows = [(experiment, rubric, s, trials, trials, 0.5, 3.0, trials // 2) for s in range(steps)]
        with self.db.transaction() as cur:
            execute_values(
                cur,
                "INSERT INTO rl_step_summaries (experiment, rubric, step, trials_planned, trials_ok, mean_reward, "
                "mean_turns, trials_verified) VALUES %s",
                rows,
                page_size=BATCH,
            )

    def add_attempts(self, experiment: str, trial_ids: list[str]) -> None:
        """One successful generation and one judging attempt per trial: the ledgers ``report`` counts."""
        generation = [(experiment, t, 1, f"synthetic-{t}", "ok") for t in trial_ids]
        judging = [(experiment, t, 1, f"{experiment}:synthetic-{t}", "ok") for t in trial_ids]
        with self.db.transaction() as cur:
            execute_values(
                cur,
                "INSERT INTO rl_generation_attempts (experiment, trial_id, attempt, identity, outcome) VALUES %s",
                generation,
                page_size=BATCH,
            )
            execute_values(
                cur,
                "INSERT INTO rl_judge_attempts (experiment, trial_id, attempt, verdict_key, outcome) VALUES %s",
                judging,
                page_size=BATCH,
            )

    def analyze(self) -> None:
        """Refresh Postgres's statistics of the tables written, as autovacuum does for a history that grew slowly:
        written at once, it would be planned with the statistics of an empty home until autovacuum came by."""
        with self.db.transaction() as cur:
            cur.execute(
                "ANALYZE runs, run_tags, event_logs, rl_train_ledger, rl_step_summaries, rl_generation_attempts, "
                "rl_judge_attempts"
            )
