"""Step summaries keep the verified trials (the pass rate's curve) and a task experiment's per-task sums.

So ``report`` (its curves and a task experiment's table) reads a row a step, not the step's rewards.
Summaries written before this migration have neither; their steps are summed from their rewards when read.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE rl_step_summaries ADD COLUMN IF NOT EXISTS trials_verified INT")
    op.execute("ALTER TABLE rl_step_summaries ADD COLUMN IF NOT EXISTS task_totals JSONB")
