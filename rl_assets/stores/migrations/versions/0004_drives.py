"""Drive requests replace the sensor's pending-request table: the daemon's sensor is the only driver.

Every experiment of an existing home is recorded as requested, so the sensor
drives what a driver would have driven before (and closes what it finds done).

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

MIGRATIONS = """
CREATE TABLE IF NOT EXISTS rl_drives (
    experiment TEXT PRIMARY KEY,
    requested_by TEXT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    done_at TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS rl_drives_open ON rl_drives (requested_at) WHERE done_at IS NULL;
INSERT INTO rl_drives (experiment, requested_by)
    SELECT name, 'migration 0004' FROM rl_experiments ON CONFLICT DO NOTHING;
DROP TABLE IF EXISTS rl_sensor_requests;
"""


def upgrade() -> None:
    op.execute(MIGRATIONS)
