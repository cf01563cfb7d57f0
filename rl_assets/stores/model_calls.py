"""The model-call ledger: what every answered model request cost, recorded as it is answered.

Rollouts are where agentic RL spends its money, and a trial that crashes after
ten model calls has still paid for them; so each answered request (one row:
the experiment, the trial, policy or judge, the model, its prompt and
completion tokens) is written the moment its answer arrives, by the process
that got it, whatever becomes of the trial. Requests that were refused (a 429,
a 5xx) or never answered are not billed by the provider and are not rows here.
Costs are derived from these rows and a price table when reported, so a
price change re-prices history without touching it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rl_assets.stores.database import Database

Role = Literal["policy", "judge"]


@dataclass(frozen=True)
class ModelUsage:
    """Answered requests and their tokens, for one (role, model)."""

    role: Role
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int


class ModelCallLedger:
    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self,
        experiment: str,
        trial_id: str,
        role: Role,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        attempt_id: int | None = None,
    ) -> None:
        """One answered request (committed at once: the bill must survive the trial's process)."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_model_calls (experiment, trial_id, role, model, attempt_id, prompt_tokens, "
                "completion_tokens) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (experiment, trial_id, role, model, attempt_id, prompt_tokens, completion_tokens),
            )

    def usage(self, experiment: str, step: int | None = None) -> list[ModelUsage]:
        """The experiment's (or one step's) answered requests and tokens per (role, model), sorted."""
        trials = "%" if step is None else f"s{step}-%"  # trial ids are s<step>-...
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT role, model, count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0) "
                "FROM rl_model_calls WHERE experiment = %s AND trial_id LIKE %s GROUP BY role, model "
                "ORDER BY role, model",
                (experiment, trials),
            )
            return [ModelUsage(r[0], r[1], int(r[2]), int(r[3]), int(r[4])) for r in cur.fetchall()]

    def calls(self, experiment: str, role: Role) -> int:
        """Answered requests of ``role`` in the experiment."""
        sql = "SELECT count(*) FROM rl_model_calls WHERE experiment = %s AND role = %s"
        return int(self.db.scalar(sql, (experiment, role)))

    def wasted_calls(self, experiment: str, role: Role = "policy") -> int:
        """Answered calls of attempts that produced nothing: failed, or cut off by a crash and never finished.

        What faults cost: a rerun after a crash repeats only these, never a call of a finished attempt.
        """
        sql = (
            "SELECT count(*) FROM rl_model_calls c JOIN rl_generation_attempts a ON a.id = c.attempt_id "
            "WHERE c.experiment = %s AND c.role = %s AND a.outcome <> 'ok'"
        )
        return int(self.db.scalar(sql, (experiment, role)))
