"""Re-scoring through Dagster's own machinery, under the real ``dagster-daemon``.

A partition backfill of rewards then weights, tagged with the rubric, is
created the way the UI's launch dialog creates one, and the daemon runs it:
rewards one run per trial, then weights in a single run that retrains the
chain in step order. Then the rubric sensor is switched on (``dagster sensor
start``), a new rubric is registered, and exactly one re-scoring follows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.utils import make_new_backfill_id

from rl_assets.assets.partitions import trial_partition_key
from rl_assets.definitions import defs
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.driver.planner import plan
from rl_assets.driver.sensor import RESCORE_EXPERIMENTS_ENV
from rl_assets.home.layout import Home
from rl_assets.home.services.daemon import LocalDaemon
from rl_assets.stores.rubrics import parse_rubric_file
from rl_assets.views.results import experiment_result
from rl_assets_testkit.expectations import cli_args, rescored_expectation, run_cli, table_of, train_json

REPO = Path(__file__).resolve().parents[1]
NAME = "backfilled"
FIELDS = dict(steps=2, worlds=2, prompts=2, samples=1)
CONFIG = ExperimentConfig(name=NAME, **FIELDS)
NEW_RUBRIC = {"name": "v3-tidy", "correctness_weight": 1.0, "efficiency_weight": 0.2, "tidiness_weight": 1.0}


def _wait(condition, what: str, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture(scope="module")
def daemon(home: Path) -> Iterator[LocalDaemon]:
    """The home's daemon, restarted with the rubric sensor on and watching this module's experiment."""
    train_json(home, *cli_args(NAME, FIELDS))
    daemon = LocalDaemon(Home(home))
    workspace = ["-w", str(daemon.write_workspace())]
    daemon.stop()
    os.environ[RESCORE_EXPERIMENTS_ENV] = NAME
    try:
        subprocess.run(
            [sys.executable, "-m", "dagster", "sensor", "start", "rubric_sensor", *workspace],
            check=True,
            capture_output=True,
            cwd=home,
        )
        daemon.ensure_running()
        yield daemon
    finally:
        subprocess.run(
            [sys.executable, "-m", "dagster", "sensor", "stop", "rubric_sensor", *workspace],
            check=True,
            capture_output=True,
            cwd=home,
        )
        del os.environ[RESCORE_EXPERIMENTS_ENV]
        daemon.stop()
        daemon.ensure_running()


def test_a_ui_backfill_of_rewards_and_weights_rescores_in_step_order(home, daemon, stores, instance):
    rewards_keys = [str(trial_partition_key(CONFIG, s, slot)) for s in range(2) for slot in CONFIG.trial_slots()]
    backfill_id = make_new_backfill_id()
    generated_before = stores.attempts.counts(NAME)["generate_attempts"]
    instance.add_backfill(
        PartitionBackfill.from_asset_partitions(
            backfill_id=backfill_id,
            asset_graph=defs.resolve_asset_graph(),
            partition_names=rewards_keys,
            asset_selection=[dg.AssetKey("rewards"), dg.AssetKey("weights")],
            backfill_timestamp=time.time(),
            tags={"rl/rubric": "v2-efficiency"},
            dynamic_partitions_store=instance,
            all_partitions=False,
            title="re-score with v2-efficiency",
            description=None,
            run_config=None,
        )
    )
    status = _wait(
        lambda: (b := instance.get_backfill(backfill_id)).status != BulkActionStatus.REQUESTED and b.status,
        "the backfill to finish",
    )
    assert status == BulkActionStatus.COMPLETED_SUCCESS, status

    result = experiment_result(stores, CONFIG.scored_with("v2-efficiency"))
    table, weights = rescored_expectation(CONFIG, "v2-efficiency")
    assert table_of(result) == table and result["weights"] == weights
    assert result["counts"]["generate_attempts"] == generated_before, "a re-scoring backfill never generates"
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [(r.run_id, r.status) for r in runs]
    # The daemon launches weights partitions as their rewards finish (one run or several); either way the
    # chain was applied in step order, each step once.
    weights_runs = [r for r in runs if r.asset_selection == {dg.AssetKey("weights")}]
    assert 1 <= len(weights_runs) <= 2 and len(runs) == len(rewards_keys) + len(weights_runs)
    with stores.db.transaction() as cur:
        cur.execute(
            "SELECT step FROM rl_train_ledger WHERE experiment = %s AND rubric = 'v2-efficiency' ORDER BY applied_at",
            (NAME,),
        )
        assert [r[0] for r in cur.fetchall()] == list(range(CONFIG.steps))


def test_a_new_rubric_triggers_exactly_one_rescoring(home, daemon, stores, instance, tmp_path):
    _wait(lambda: _ticks(instance), "the sensor's first tick (its baseline of the registered rubrics)")
    path = tmp_path / "v3-tidy.json"
    path.write_text(json.dumps(NEW_RUBRIC))
    run_cli(home, "rubrics", "--add", str(path))
    rubric = parse_rubric_file(path)

    _wait(lambda: plan(instance, stores, CONFIG, rubric.name).done, "the re-scoring with v3-tidy", timeout=400)
    assert stores.scorings.requested(NAME) == ["v3-tidy"]
    weights_of_v3 = tuple(NEW_RUBRIC[f"{part}_weight"] for part in ("correctness", "efficiency", "tidiness"))
    table, weights = rescored_expectation(CONFIG, NEW_RUBRIC["name"], weights_of_v3)
    result = experiment_result(stores, CONFIG.scored_with(rubric.name))
    assert table_of(result) == table and result["weights"] == weights

    # Later ticks see nothing new: no second scoring, no second judge call.
    seen = _ticks(instance)
    _wait(lambda: _ticks(instance) >= seen + 2, "two more rubric sensor ticks", timeout=120)
    with stores.db.transaction() as cur:
        cur.execute(
            "SELECT count(*) FROM rl_judge_calls WHERE experiment = %s AND verdict_key LIKE %s",
            (NAME, f"%:{rubric.content_hash}:%"),
        )
        assert cur.fetchone()[0] == len(CONFIG.trials(0)) * 2, "one judge call per trial under the new rubric"
    assert len(stores.training.steps(NAME, rubric.name)) == 2


def _ticks(instance) -> int:
    """The rubric sensor's ended ticks (the daemon's record of each evaluation)."""
    from dagster._core.scheduler.instigation import InstigatorType, TickStatus

    sensors = instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
    states = [s for s in sensors if s.name == "rubric_sensor"]
    if not states:
        return 0
    ticks = instance.get_ticks(states[0].instigator_origin_id, states[0].selector_id, limit=1000)
    return sum(1 for t in ticks if t.status != TickStatus.STARTED)
