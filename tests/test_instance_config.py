"""The repository's dagster.yaml and the one a local home writes agree on storage."""

from pathlib import Path

import yaml

from rl_assets.services.local_deployment import DAGSTER_YAML

ROOT = Path(__file__).resolve().parents[1]


def test_home_and_repo_instance_configs_agree():
    repo = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    home = yaml.safe_load(DAGSTER_YAML)
    assert repo == home
    assert repo["storage"]["postgres"]["postgres_db"]["scheme"] == "postgresql+psycopg2"


def test_local_home_uses_postgres_not_sqlite(home, instance):
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    assert "sqlite" not in (home / "dagster" / "dagster.yaml").read_text()


def test_the_drivers_sensor_ticks_are_purged_not_kept_forever(instance):
    """Dagster keeps a sensor's successful ticks forever by default; the driver's tick every few seconds."""
    purge = instance.get_settings("retention")["sensor"]["purge_after_days"]
    assert purge == {"skipped": 1, "success": 14, "failure": 60}
