"""Indexes for the ledgers' lookups, so none of them reads a long history's rows.

Without them every judge call's claim read every judge call of the home (by verdict key), a training
step's bill read every model call of its experiment (by trial-id prefix), and ``status``, ``report`` and
``train --json`` counted attempts by scanning every experiment's. ``tests/test_ledger_indexes.py`` holds
each lookup to an index.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

MIGRATIONS = """
CREATE INDEX IF NOT EXISTS rl_generation_attempts_trial ON rl_generation_attempts (experiment, trial_id);
CREATE INDEX IF NOT EXISTS rl_judge_attempts_trial ON rl_judge_attempts (experiment, trial_id);
CREATE INDEX IF NOT EXISTS rl_judge_attempts_verdict ON rl_judge_attempts (verdict_key);
CREATE INDEX IF NOT EXISTS rl_judge_calls_verdict ON rl_judge_calls (verdict_key, id);
CREATE INDEX IF NOT EXISTS rl_judge_calls_experiment ON rl_judge_calls (experiment, id);
CREATE INDEX IF NOT EXISTS rl_model_calls_trial ON rl_model_calls (experiment, trial_id text_pattern_ops);
CREATE INDEX IF NOT EXISTS rl_driver_attempts_experiment ON rl_driver_attempts (experiment, pid);
"""


def upgrade() -> None:
    op.execute(MIGRATIONS)
