"""The training ledger and the checkpoint store.

``rl_train_ledger`` has one row per (experiment, rubric, step): the identity
of the step (parent policy hash + canonical batch hash), the resulting policy
hash and version, and the pid of the actor that applied it. A row is written
only after the resulting checkpoint is on disk, so a ledger row always points
at a readable policy; a step with a row is never applied again.

Writers of one step (a CLI driver's train run and a backfill's, say) are
serialised by :meth:`TrainingLedger.step_lock`: without it both could pass
the "no row yet" check, and the later checkpoint write would replace the
checkpoint of the row that won.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rl_assets.domain.bandit import step_summary
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy, Reward
from rl_assets.domain.task_totals import TaskTotals, task_totals
from rl_assets.stores.artifacts import ArtifactStore, CorruptArtifactError
from rl_assets.stores.database import Database
from rl_assets.stores.locks import LockSpace, hashed, xact_lock


@dataclass(frozen=True)
class AppliedStep:
    experiment: str
    rubric: str
    step: int
    identity: str
    parent_hash: str
    policy_hash: str
    version: int
    actor_pid: int


@dataclass(frozen=True)
class StepSummary:
    """What a trained step's batch came to: written with the step, read by ``status`` instead of its rewards."""

    experiment: str
    rubric: str
    step: int
    trials_planned: int
    trials_ok: int
    mean_reward: float | None
    mean_turns: float | None
    trials_verified: int | None = None
    """Trials the verifier passed (None in summaries older than the count)."""
    task_totals: dict[str, TaskTotals] | None = None
    """A task experiment's sums per task (None for other workloads, and for summaries older than them)."""

    @classmethod
    def of_batch(cls, config: ExperimentConfig, step: int, batch: list[Reward]) -> StepSummary:
        """What step ``step`` of ``config``'s chain came to, from its training batch: the train step writes it;
        a reader sums a step trained before summaries (or their newer fields) existed the same way."""
        mean_reward, mean_turns = step_summary(batch)
        return cls(
            config.name,
            config.rubric,
            step,
            len(config.trial_slots()),
            len(batch),
            mean_reward,
            mean_turns,
            sum(r.verified for r in batch),
            task_totals(batch) if config.tasks is not None else None,
        )


def _dumped(totals: dict[str, TaskTotals]) -> dict[str, dict]:
    return {task: t.model_dump() for task, t in totals.items()}


def _loaded(column: dict | None) -> dict[str, TaskTotals] | None:
    return None if column is None else {task: TaskTotals(**t) for task, t in column.items()}


class TrainingLedger:
    def __init__(self, db: Database) -> None:
        self.db = db

    @contextmanager
    def step_lock(self, experiment: str, rubric: str, step: int) -> Iterator[None]:
        """Hold the step's lock (a transaction-scoped advisory lock on a connection of its own).

        The lock goes with its transaction: when the holder dies or Postgres
        restarts, it is released, and the holder's own ledger write still
        keeps the first row (see :meth:`record`).
        """
        lock = hashed(LockSpace.TRAIN_STEP, f"{experiment}\0{rubric}\0{step}")
        conn = self.db.info.connect()
        try:
            with conn, conn.cursor() as cur:
                xact_lock(cur, lock)
                yield
        finally:
            conn.close()

    def get(self, experiment: str, rubric: str, step: int) -> AppliedStep | None:
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT experiment, rubric, step, identity, parent_hash, policy_hash, version, actor_pid "
                "FROM rl_train_ledger WHERE experiment = %s AND rubric = %s AND step = %s",
                (experiment, rubric, step),
            )
            row = cur.fetchone()
        return None if row is None else AppliedStep(*row)

    def record(self, applied: AppliedStep) -> AppliedStep:
        """Insert the row unless one exists; returns the row that is in the ledger."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_train_ledger (experiment, rubric, step, identity, parent_hash, policy_hash, "
                "version, actor_pid) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (experiment, rubric, step) DO NOTHING",
                (
                    applied.experiment,
                    applied.rubric,
                    applied.step,
                    applied.identity,
                    applied.parent_hash,
                    applied.policy_hash,
                    applied.version,
                    applied.actor_pid,
                ),
            )
        recorded = self.get(applied.experiment, applied.rubric, applied.step)
        assert recorded is not None
        return recorded

    def frontier(self, experiment: str, rubric: str) -> int:
        """How many steps are in the ledger: steps are applied in order, so these are steps ``0..frontier-1``.

        One indexed read, however long the experiment: what a planning tick asks instead of every row.
        """
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT coalesce(max(step) + 1, 0) FROM rl_train_ledger WHERE experiment = %s AND rubric = %s",
                (experiment, rubric),
            )
            return cur.fetchone()[0]

    def summarize(self, summary: StepSummary) -> None:
        """Record (or refresh, after a repair) the step's summary: the batch is canonical, so it only ever agrees."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_step_summaries (experiment, rubric, step, trials_planned, trials_ok, mean_reward, "
                "mean_turns, trials_verified, task_totals) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (experiment, rubric, step) DO UPDATE "
                "SET trials_planned = EXCLUDED.trials_planned, trials_ok = EXCLUDED.trials_ok, "
                "mean_reward = EXCLUDED.mean_reward, mean_turns = EXCLUDED.mean_turns, "
                "trials_verified = EXCLUDED.trials_verified, task_totals = EXCLUDED.task_totals",
                (
                    summary.experiment,
                    summary.rubric,
                    summary.step,
                    summary.trials_planned,
                    summary.trials_ok,
                    summary.mean_reward,
                    summary.mean_turns,
                    summary.trials_verified,
                    None if summary.task_totals is None else json.dumps(_dumped(summary.task_totals)),
                ),
            )

    def summaries(self, experiment: str, rubric: str) -> dict[int, StepSummary]:
        """The recorded summaries of the experiment's steps under ``rubric``, by step."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT experiment, rubric, step, trials_planned, trials_ok, mean_reward, mean_turns, trials_verified, "
                "task_totals "
                "FROM rl_step_summaries WHERE experiment = %s AND rubric = %s",
                (experiment, rubric),
            )
            return {row[2]: StepSummary(*row[:8], _loaded(row[8])) for row in cur.fetchall()}

    def rubrics(self, experiment: str) -> list[str]:
        """The rubrics ``experiment`` was trained under (its own, and every re-scoring), sorted."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT DISTINCT rubric FROM rl_train_ledger WHERE experiment = %s ORDER BY rubric", (experiment,)
            )
            return [row[0] for row in cur.fetchall()]

    def steps(self, experiment: str, rubric: str) -> list[AppliedStep]:
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT experiment, rubric, step, identity, parent_hash, policy_hash, version, actor_pid "
                "FROM rl_train_ledger WHERE experiment = %s AND rubric = %s ORDER BY step",
                (experiment, rubric),
            )
            return [AppliedStep(*row) for row in cur.fetchall()]


class CheckpointStore:
    """Policies after each step, content-verified against the ledger's hash."""

    def __init__(self, artifacts: ArtifactStore) -> None:
        self.artifacts = artifacts

    @staticmethod
    def _rel(experiment: str, rubric: str, step: int) -> str:
        return f"checkpoints/{experiment}/{rubric}/s{step}"

    def save(self, experiment: str, rubric: str, step: int, policy: Policy) -> None:
        self.artifacts.write(self._rel(experiment, rubric, step), policy)

    def load(self, experiment: str, rubric: str, step: int, expected_hash: str | None = None) -> Policy | None:
        policy = self.artifacts.read(self._rel(experiment, rubric, step), Policy)
        if policy is not None and expected_hash is not None and policy.content_hash != expected_hash:
            raise CorruptArtifactError(
                self.artifacts.path(self._rel(experiment, rubric, step)),
                f"checkpoint has hash {policy.content_hash}, the ledger recorded {expected_hash}",
            )
        return policy
