"""The tutorial's chaos run on a real Postgres server that is restarted mid-run (plus the driver kill)."""

from __future__ import annotations

import json
import subprocess
import sys

from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

from rl_assets.home.layout import Home
from rl_assets.home.services.postgres import EmbeddedPostgres
from rl_assets_testkit.expectations import table_of
from rl_assets_testkit.kills import wait_for

CLEAN = [(1.601, 4.67, 6), (2.323, 2.17, 6), (2.352, 1.67, 6)]


def test_chaos_run_survives_a_driver_kill_and_a_postgres_restart(home, stores, instance):
    assert isinstance(instance.run_storage, PostgresRunStorage)
    assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
    assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
    args = ["--experiment", "pgrestart", "--flaky-trial-rate", "0.25", "--judge-flake-rate", "0.3"]
    args += ["--crash-driver-at-step", "1", "--json", "--home", str(home)]
    train = subprocess.Popen(
        [sys.executable, "-m", "rl_assets.cli", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    # mid-run: step 0 trained, step 1 rolling out
    wait_for(lambda: stores.training.get("pgrestart", "v1", 0), "step 0 trained", 600, while_running=train)

    server = EmbeddedPostgres(Home(home))
    port = server.info().port
    assert server.stop() and not server.is_running()
    server.ensure_running()
    assert server.info().port == port, "the restarted server keeps the address every process was given"

    out, err = train.communicate(timeout=900)
    assert train.returncode == 0, err[-3000:]
    result = json.loads(out)
    assert table_of(result) == CLEAN
    assert result["weights"]["w2"] == [1.0, 28.984, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert result["counts"]["train_applications"] == 3, "no step applied twice, none lost"
    assert result["counts"]["driver_attempts"] >= 2
    with stores.db.transaction() as cur:
        cur.execute("SELECT count(DISTINCT verdict_key) FROM rl_verdicts WHERE verdict_key LIKE 'pgrestart:%'")
        assert cur.fetchone()[0] == 18, "one verdict per trial"
