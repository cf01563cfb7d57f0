"""Step summaries: what ``status`` shows of a trained step, written when the step trains.

Reading an experiment's state then costs one row a step instead of every reward file of it.
Steps trained before this migration have no row; they are summarized from their rewards when read.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

MIGRATIONS = """
CREATE TABLE IF NOT EXISTS rl_step_summaries (
    experiment TEXT NOT NULL,
    rubric TEXT NOT NULL,
    step INT NOT NULL,
    trials_planned INT NOT NULL,
    trials_ok INT NOT NULL,
    mean_reward DOUBLE PRECISION,
    mean_turns DOUBLE PRECISION,
    PRIMARY KEY (experiment, rubric, step)
);
"""


def upgrade() -> None:
    op.execute(MIGRATIONS)
