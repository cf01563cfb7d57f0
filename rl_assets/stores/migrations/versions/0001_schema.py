"""The ledger tables as the first release made them.

Idempotent (``IF NOT EXISTS``), as every pre-Alembic release ran it on each
connect: over a home one of them made, it adds only the tables that release lacked.

Revision ID: 0001
Revises:
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SCHEMA = """
CREATE TABLE IF NOT EXISTS rl_experiments (
    name TEXT PRIMARY KEY,
    config JSONB NOT NULL,
    config_hash TEXT NOT NULL,
    faults JSONB NOT NULL DEFAULT '{}',
    forked_from TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_generation_attempts (
    id BIGSERIAL PRIMARY KEY,
    experiment TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    attempt INT NOT NULL,
    identity TEXT NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    fork_kind TEXT,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS rl_verdicts (
    verdict_key TEXT PRIMARY KEY,
    verdict JSONB NOT NULL,
    content_hash TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_judge_calls (
    id BIGSERIAL PRIMARY KEY,
    verdict_key TEXT NOT NULL,
    experiment TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    status TEXT NOT NULL,
    cause TEXT,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS rl_judge_attempts (
    id BIGSERIAL PRIMARY KEY,
    experiment TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    attempt INT NOT NULL,
    verdict_key TEXT NOT NULL,
    cache_hit BOOLEAN,
    outcome TEXT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_train_ledger (
    experiment TEXT NOT NULL,
    rubric TEXT NOT NULL,
    step INT NOT NULL,
    identity TEXT NOT NULL,
    parent_hash TEXT NOT NULL,
    policy_hash TEXT NOT NULL,
    version INT NOT NULL,
    actor_pid INT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (experiment, rubric, step)
);
CREATE TABLE IF NOT EXISTS rl_trial_failures (
    experiment TEXT NOT NULL,
    trial_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    error TEXT NOT NULL,
    failed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (experiment, trial_id)
);
CREATE TABLE IF NOT EXISTS rl_damage (
    id BIGSERIAL PRIMARY KEY,
    kind TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    detail TEXT NOT NULL,
    detected_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    repaired_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX IF NOT EXISTS rl_damage_open ON rl_damage (kind, partition_key) WHERE repaired_at IS NULL;
CREATE TABLE IF NOT EXISTS rl_rubrics (
    name TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL,
    rubric JSONB NOT NULL,
    registered_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_scorings (
    experiment TEXT NOT NULL,
    rubric TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (experiment, rubric)
);
CREATE TABLE IF NOT EXISTS rl_sensor_requests (
    experiment TEXT NOT NULL,
    run_key TEXT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (experiment, run_key)
);
CREATE TABLE IF NOT EXISTS rl_world_seals (
    world_id TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    sealed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS rl_judge_rate (
    id BIGSERIAL PRIMARY KEY,
    judge_id TEXT NOT NULL,
    called_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS rl_judge_rate_window ON rl_judge_rate (judge_id, called_at);
CREATE TABLE IF NOT EXISTS rl_driver_attempts (
    id BIGSERIAL PRIMARY KEY,
    experiment TEXT NOT NULL,
    pid INT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""


def upgrade() -> None:
    op.execute(SCHEMA)
