"""The reference experiment end to end: real Dagster on Postgres, real Ray, a process per trial."""

from __future__ import annotations

import json
import subprocess
import sys

import dagster as dg
import psutil

from rl_assets.domain.run_tags import EXPERIMENT_TAG
from rl_assets_testkit.expectations import run_cli, train_json
from rl_assets_testkit.kills import wait_for


def test_reference_run_reproduces_the_clean_table(home, stores, instance):
    result = train_json(home, "--experiment", "ref")
    assert result["experiment"] == "ref" and result["rubric"] == "v1"
    table = [
        (s["step"], s["trials_planned"], s["trials_ok"], s["mean_reward"], s["mean_turns"], s["weights_version"])
        for s in result["steps"]
    ]
    assert table == [(0, 6, 6, 1.601, 4.67, 1), (1, 6, 6, 2.323, 2.17, 2), (2, 6, 6, 2.352, 1.67, 3)]
    assert result["weights"] == {
        "w0": [1.0, 23.936, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        "w1": [24.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        "w2": [1.0, 28.984, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    }
    assert result["counts"] == {
        "generate_attempts": 18,
        "generate_failures": 0,
        "judge_calls": 18,
        "judge_attempts": 18,
        "train_applications": 3,
        "driver_attempts": 1,
    }
    pids = {s["actor_pid"] for s in result["steps"]}
    assert len(pids) == 1, "every step is applied by the same warm trainer actor"
    # ... which ends once the last step is in the ledger: a finished experiment holds no trainer memory.
    (pid,) = pids
    wait_for(lambda: not _trainer_actor_alive(pid), "the trainer actor to end after the last step")

    # Durable records agree with the printed counts: the judge ledger has one call per trial, all done.
    with stores.db.transaction() as cur:
        cur.execute(
            "SELECT count(*), count(DISTINCT verdict_key) FROM rl_judge_calls WHERE experiment = 'ref' "
            "AND status = 'done'"
        )
        assert cur.fetchone() == (18, 18)
        cur.execute("SELECT step, version FROM rl_train_ledger WHERE experiment = 'ref' ORDER BY step")
        assert cur.fetchall() == [(0, 1), (1, 2), (2, 3)]

    # Dagster holds real lineage: every trial's trajectory and reward, every step's weights.
    assert len(instance.get_materialized_partitions(dg.AssetKey("rewards")) & _ref_trials()) == 18
    assert {"ref/s0", "ref/s1", "ref/s2"} <= instance.get_materialized_partitions(dg.AssetKey("weights"))
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("weights"), asset_partitions=["ref/s2"]), limit=1
    ).records[0]
    meta = record.asset_materialization.metadata
    assert meta["mean_reward"].value == 2.352 and meta["weights_version"].value == 3
    assert meta["parent_hash"].value != meta["policy_hash"].value

    # Running the same command on a finished experiment does no work and prints the same result.
    runs_before = len(instance.get_runs(filters=dg.RunsFilter(tags={EXPERIMENT_TAG: "ref"})))
    again = run_cli(home, "train", "--experiment", "ref", "--json").stdout
    assert json.loads(again) == result
    assert len(instance.get_runs(filters=dg.RunsFilter(tags={EXPERIMENT_TAG: "ref"}))) == runs_before

    # Changing the configuration of an existing experiment is refused, with a clear message.
    refused = run_cli(home, "train", "--experiment", "ref", "--lr", "1.0", check=False)
    assert refused.returncode == 2
    assert "already exists with a different configuration (lr: 2.0 -> 1.0)" in refused.stderr

    status = json.loads(run_cli(home, "status", "--experiment", "ref", "--json").stdout)
    assert status["status"] == "done" and status["steps"] == result["steps"]
    assert status["progress"] == "ref: 3/3 steps trained (rubric v1)" and status["observed_at"]


def test_status_reads_the_drivers_note_and_the_ledgers_and_loads_no_orchestration_framework(home):
    train_json(home, "--experiment", "ref")  # done already (the test above): notes its last line again
    probe = (
        "import sys; from rl_assets.cli.commands import main; main(sys.argv[1:]); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'dagster', 'dagster_postgres', 'ray', 'torch'}))"
    )
    command = [sys.executable, "-c", probe, "status", "--experiment", "ref", "--home", str(home)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    lines = proc.stdout.splitlines()
    assert lines[0] == "ref: 3/3 steps trained (rubric v1)" and lines[-1] == "[]", proc.stdout


def _trainer_actor_alive(pid: int) -> bool:
    try:
        return "TrainerActor" in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:  # gone (or a zombie being reaped)
        return False


def _ref_trials() -> set[str]:
    return {f"ref/s{s}|p{p}-n{n}" for s in range(3) for p in range(3) for n in range(2)}
