"""Progress notes: the driver's line for each experiment and rubric it plans, read by ``status``.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

MIGRATIONS = """
CREATE TABLE IF NOT EXISTS rl_progress (
    experiment TEXT NOT NULL,
    rubric TEXT NOT NULL,
    line TEXT NOT NULL,
    done BOOLEAN NOT NULL,
    observed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (experiment, rubric)
);
"""


def upgrade() -> None:
    op.execute(MIGRATIONS)
