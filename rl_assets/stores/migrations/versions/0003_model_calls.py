"""The model-call ledger: every answered policy and judge request, with the tokens it was billed.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

MIGRATIONS = """
CREATE TABLE IF NOT EXISTS rl_model_calls (
    id BIGSERIAL PRIMARY KEY,
    experiment TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('policy', 'judge')),
    model TEXT NOT NULL,
    attempt_id BIGINT,
    prompt_tokens BIGINT NOT NULL CHECK (prompt_tokens >= 0),
    completion_tokens BIGINT NOT NULL CHECK (completion_tokens >= 0),
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS rl_model_calls_experiment ON rl_model_calls (experiment, role);
"""


def upgrade() -> None:
    op.execute(MIGRATIONS)
