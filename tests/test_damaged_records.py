"""Records damaged behind the system's back: detected by checksum, regenerated cleanly, never used.

One small experiment is trained once; each test damages one kind of record
on disk or in Postgres, reruns the same ``train`` command (``--audit`` where
the damage is in a step older than the work ahead), and checks that
the result is the clean one, that only the damaged unit was redone (no
regeneration while a rollout is intact, no judge call while a verdict is
intact, no training step applied again), and that the report says what was
repaired.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets_testkit.expectations import cli_args, oracle_expectation, run_cli, table_of

NAME = "damaged"
FIELDS = dict(steps=2, worlds=2, prompts=2, samples=1)
CONFIG = ExperimentConfig(name=NAME, **FIELDS)


def _train(home: Path, *extra: str) -> tuple[dict, str]:
    proc = run_cli(home, "train", *cli_args(NAME, FIELDS), "--json", *extra)
    return json.loads(proc.stdout), proc.stderr


@pytest.fixture(scope="module")
def trained(home: Path) -> dict:
    result, _ = _train(home)
    table, weights = oracle_expectation(CONFIG)
    assert table_of(result) == table and result["weights"] == weights
    return result


def _rewrite_payload(path: Path, change) -> None:
    """Edit a record's payload but keep its old checksum, as a stray edit would."""
    body = json.loads(path.read_text())
    change(body["payload"])
    path.write_text(json.dumps(body))


def _assert_clean(result: dict, trained: dict) -> None:
    assert table_of(result) == table_of(trained)
    assert result["weights"] == trained["weights"]
    assert result["counts"]["train_applications"] == FIELDS["steps"], "no step applied twice"


def _repairs(home: Path) -> list[dict]:
    return json.loads(run_cli(home, "report", "--experiment", NAME, "--json").stdout)["repairs"]


def test_damaged_trajectory_and_missing_reward_are_rebuilt_from_intact_records(home, trained):
    artifacts = home / "artifacts"
    trajectory = artifacts / f"trajectories/{NAME}/s0/p0-n0.json"
    _rewrite_payload(trajectory, lambda p: p.update(answer="tampered"))
    (artifacts / f"rewards/{NAME}/v1/s1/p1-n0.json").unlink()
    before = trained["counts"]

    result, stderr = _train(home, "--audit")

    _assert_clean(result, trained)
    counts = result["counts"]
    assert counts["generate_attempts"] == before["generate_attempts"], "the cached rollout was reused"
    assert counts["judge_calls"] == before["judge_calls"], "the recorded verdicts were reused"
    assert "trial damaged/s0|p0-n0: trajectory record was damaged" in stderr
    assert "trial damaged/s1|p1-n0: reward record is missing" in stderr
    assert json.loads(trajectory.read_text())["payload"]["answer"] != "tampered"
    assert list((home / "quarantine" / "trajectories" / NAME / "s0").glob("p0-n0.json.*")), "damaged copy kept"
    repaired = {(r["kind"], r["unit"]) for r in _repairs(home) if r["repaired"]}
    assert {("trial", "damaged/s0|p0-n0"), ("trial", "damaged/s1|p1-n0")} <= repaired


def test_damaged_rollout_cache_is_regenerated_to_the_same_trajectory(home, trained, stores):
    artifacts = home / "artifacts"
    cached = next(
        p
        for p in (artifacts / "rollouts" / NAME).glob("*.json")
        if json.loads(p.read_text())["payload"]["trial_id"] == "s1-p0-n0"
    )
    cached.write_text(cached.read_text()[:-7])  # truncated: no longer JSON
    record = artifacts / f"trajectories/{NAME}/s1/p0-n0.json"
    _rewrite_payload(record, lambda p: p.update(turns=[]))
    before = stores.attempts.counts(NAME)

    result, _ = _train(home)

    _assert_clean(result, trained)
    assert result["counts"]["generate_attempts"] == before["generate_attempts"] + 1, "only that rollout regenerated"
    assert result["counts"]["judge_calls"] == before["judge_calls"], "same trajectory, so its verdict is reused"
    assert json.loads(cached.read_text())["payload"]["trial_id"] == "s1-p0-n0"


def test_modified_verdict_is_judged_again_and_the_extra_call_counted(home, trained, stores):
    with stores.db.transaction() as cur:
        cur.execute(
            "SELECT verdict_key FROM rl_judge_attempts WHERE experiment = %s AND trial_id = 's0-p1-n0' LIMIT 1",
            (NAME,),
        )
        key = cur.fetchone()[0]
        cur.execute(
            "UPDATE rl_verdicts SET verdict = jsonb_set(verdict, '{score}', '0.99') WHERE verdict_key = %s", (key,)
        )
    before = stores.attempts.counts(NAME)

    result, stderr = _train(home)

    _assert_clean(result, trained)
    assert result["counts"]["judge_calls"] == before["judge_calls"] + 1
    assert result["counts"]["generate_attempts"] == before["generate_attempts"]
    assert "its verdict was modified" in stderr
    report = json.loads(run_cli(home, "report", "--experiment", NAME, "--json").stdout)
    assert report["judge_calls"]["extra_call_causes"] == {"verdict damaged": 1}
    assert stores.verdicts.get(key) is not None, "the verdict is recorded again, intact"


def test_damaged_checkpoint_is_rederived_without_applying_the_step_again(home, trained, stores):
    checkpoint = home / f"artifacts/checkpoints/{NAME}/v1/s1.json"
    _rewrite_payload(checkpoint, lambda p: p["priors"]["w0"].__setitem__(0, 99.0))
    ledger_before = stores.training.steps(NAME, "v1")

    result, stderr = _train(home)

    _assert_clean(result, trained)
    assert "step damaged/s1: checkpoint record was damaged" in stderr
    assert stores.training.steps(NAME, "v1") == ledger_before, "the ledger is untouched"
    policy = stores.checkpoints.load(NAME, "v1", 1, expected_hash=ledger_before[1].policy_hash)
    assert policy is not None


def test_modified_world_is_rebuilt_to_its_recorded_hash(home, trained, stores):
    world = home / "worlds" / "w1"
    victim = next(p for p in sorted(world.rglob("*")) if p.is_file())
    for path in (victim.parent, victim):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    victim.write_text("rewritten behind the system's back")
    recorded = (home / "worlds" / "w1.sha256").read_text()
    before = stores.attempts.counts(NAME)

    result, stderr = _train(home)

    _assert_clean(result, trained)
    assert "world w1: world w1 was modified after it was sealed" in stderr
    assert victim.read_text() != "rewritten behind the system's back"
    assert not os.access(victim, os.W_OK) or os.geteuid() == 0 and not victim.stat().st_mode & stat.S_IWUSR
    assert (home / "worlds" / "w1.sha256").read_text() == recorded
    assert result["counts"]["generate_attempts"] == before["generate_attempts"], "finished trials are not redone"


def test_report_finds_a_damaged_reward_status_reads_summaries_and_both_leave_it_for_train(home, trained, stores):
    failed = stores.attempts.failed_trials(NAME)  # judged, but left failed by an earlier test's fault: not repairable
    slot = next(t.trial_id.split("-", 1)[1] for t in CONFIG.trials(0) if t.trial_id not in failed)
    reward = home / f"artifacts/rewards/{NAME}/v1/s0/{slot}.json"
    _rewrite_payload(reward, lambda p: p.update(reward=99.0))
    damaged = reward.read_bytes()

    status = json.loads(run_cli(home, "status", "--experiment", NAME, "--json").stdout)
    summary_report = json.loads(run_cli(home, "report", "--experiment", NAME, "--json").stdout)
    report = json.loads(run_cli(home, "report", "--experiment", NAME, "--audit", "--json").stdout)
    text = run_cli(home, "report", "--experiment", NAME, "--audit").stdout

    assert [s["mean_reward"] for s in status["steps"]] == [s["mean_reward"] for s in trained["steps"]], (
        "status shows the summaries written when the steps trained, without reading every reward"
    )
    assert summary_report["checks"] is None, "a plain report reads summaries and ledgers, no reward file"
    assert summary_report["learning"]["steps"] == status["steps"]
    broken = [c for c in report["checks"] if not c["passed"]]
    assert {c["unit"] for c in broken} == {f"{NAME}/s0|{slot}", f"{NAME}/s0"}, "the reward, and the step it trained"
    assert any(f"the reward record of s0-{slot} is damaged" in c["detail"] for c in broken), broken
    # A person reading the text report sees the failure on a line of its own, with its unit and rubric.
    failed_line = f"  check failed  reward_in_range {NAME}/s0|{slot} (v1): s0-{slot}: the reward record is damaged ("
    assert any(line.startswith(failed_line) for line in text.splitlines()), text
    assert reward.read_bytes() == damaged, "a read path leaves the record where and as it is"
    assert not list((home / "quarantine" / "rewards").rglob(f"{slot}.json.*"))
    assert f"{NAME}/s0|{slot}" not in stores.damage.open_keys("trial"), "and opens no damage"

    result, stderr = _train(home)  # the work ahead of a finished experiment is none: step 0 is not read

    _assert_clean(result, trained)
    assert "record was damaged" not in stderr and reward.read_bytes() == damaged, "left for `train --audit`"

    result, stderr = _train(home, "--audit")

    _assert_clean(result, trained)
    assert f"trial damaged/s0|{slot}: reward record was damaged" in stderr
    assert list((home / "quarantine" / "rewards").rglob(f"{slot}.json.*")), "train quarantined it"


def test_a_unit_repaired_again_and_again_is_never_given_up_as_crashing(home, trained):
    """Each repair runs the trial again though no run of it failed: only failed runs count toward giving up."""
    reward = home / "artifacts" / f"rewards/{NAME}/v1/s0/p1-n0.json"
    for _ in range(3):  # with every run counted, the third repair found 3 runs and failed the trial for good
        reward.unlink()
        result, stderr = _train(home, "--audit")
        _assert_clean(result, trained)
        assert "its runs died" not in stderr
    report = json.loads(run_cli(home, "report", "--experiment", NAME, "--json").stdout)
    assert "s0-p1-n0" not in report["generate"]["failed_for_good"]
