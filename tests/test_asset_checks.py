"""The invariants as asset checks: every one passes on a clean experiment, and each fails on the record it guards.

One small experiment is trained (and re-scored, so a re-scoring chain's
off-policy batches are checked too). The checks run in the real runs that
materialized it: their evaluations are in the Dagster instance, per
partition. Each damage test then damages one record for real (a world's
file, a reward's file, a verdict's row, a training ledger row, a trajectory)
in the shared home, sees the check that guards it fail in ``report``'s
checks, puts the record back, and sees it pass again. One test re-judges a
reward under Dagster with a second verdict in the ledger and sees the
blocking check fail the run after the materialization, and the driver's
plan not count that reward until a run of the unit succeeds.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.invariants import INVARIANTS
from rl_assets.domain.models import Reward, Trajectory
from rl_assets.domain.run_tags import EXPERIMENT_TAG, PARTITION_TAG, RUBRIC_TAG
from rl_assets.driver.planner import plan
from rl_assets.home.layout import Home
from rl_assets.stores.home_stores import Stores
from rl_assets.views.invariant_records import CheckOutcome, experiment_checks
from rl_assets.worlds.local import LocalWorlds
from rl_assets_testkit.expectations import cli_args, run_cli

NAME = "checked"
FIELDS = dict(steps=2, worlds=2, prompts=2, samples=1)
CONFIG = ExperimentConfig(name=NAME, **FIELDS)
RESCORED = "v2-efficiency"
CHECK_NAMES = {i.name for i in INVARIANTS}


@pytest.fixture(scope="module")
def trained(home: Path) -> None:
    run_cli(home, "train", *cli_args(NAME, FIELDS), "--json")
    run_cli(home, "rescore", "--experiment", NAME, "--rubric", RESCORED, "--json")


def _checks(home: Path, stores: Stores) -> list[CheckOutcome]:
    h = Home(home)
    return experiment_checks(stores, CONFIG, LocalWorlds(h.worlds, h.forks, h.tasks))


def _failures(home: Path, stores: Stores) -> dict[tuple[str, str, str | None], str]:
    return {(c.check, c.unit, c.rubric): c.detail for c in _checks(home, stores) if not c.passed}


@contextmanager
def _restored(path: Path) -> Iterator[None]:
    """Put ``path``'s bytes and mode back afterwards, whatever the test did to it."""
    body, mode = path.read_bytes(), stat.S_IMODE(path.stat().st_mode)
    try:
        yield
    finally:
        path.chmod(mode | stat.S_IWUSR)
        path.write_bytes(body)
        path.chmod(mode)


def test_a_clean_experiment_passes_every_check_in_report_and_in_its_runs(home, trained, stores, instance):
    checks = _checks(home, stores)
    assert {c.check for c in checks} == CHECK_NAMES
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]
    per_rubric_rewards = FIELDS["steps"] * FIELDS["prompts"] * FIELDS["samples"]
    assert sum(c.check == "one_verdict" for c in checks) == 2 * per_rubric_rewards, "each rubric's rewards"
    assert sum(c.check == "world_sealed" for c in checks) == FIELDS["worlds"]
    off = [c.detail for c in checks if c.check == "on_policy" and c.rubric == RESCORED and c.unit == f"{NAME}/s1"]
    assert off == [f"step 1: on-policy 0, off-policy 2 (re-scored under {RESCORED})"]
    own = [c.detail for c in checks if c.check == "on_policy" and c.rubric == "v1" and c.unit == f"{NAME}/s1"]
    assert own == ["step 1: on-policy 2"]

    text = run_cli(home, "report", "--experiment", NAME, "--audit").stdout
    for invariant in INVARIANTS:
        assert f"check         {invariant.name:<16} {invariant.asset:<8} " in text
    assert "check failed" not in text and "FAILED" not in text
    report = json.loads(run_cli(home, "report", "--experiment", NAME, "--audit", "--json").stdout)
    assert len(report["checks"]) == len(checks) and all(c["passed"] for c in report["checks"])

    # All six checks ran with each materialization, per partition, and passed. (A run that failed before its
    # step, e.g. on Dagster's race creating a pool's default limit in a fresh home, planned its check, never ran it.)
    partitions_of = {
        "worlds": set(CONFIG.world_ids),
        "rewards": {f"{NAME}/s{s}|{slot}" for s in range(2) for slot in CONFIG.trial_slots()},
        "weights": {f"{NAME}/s0", f"{NAME}/s1"},
    }
    assert len(INVARIANTS) == len(CHECK_NAMES) == 6
    for invariant in INVARIANTS:
        asset, name, partitions = invariant.asset, invariant.name, partitions_of[invariant.asset]
        records = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(dg.AssetKey(asset), name), limit=1000
        )
        evaluated = [r for r in records if r.partition in partitions and r.status.value in ("SUCCEEDED", "FAILED")]
        assert {r.partition for r in evaluated} == partitions, (asset, name)
        assert [r for r in evaluated if r.status.value != "SUCCEEDED"] == [], (asset, name)


def test_world_sealed_fails_when_a_sealed_world_is_modified(home, trained, stores):
    victim = next(p for p in sorted((home / "worlds" / "w1").rglob("*")) if p.is_file())
    for path in (victim.parent, victim):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    victim.write_text("rewritten behind the system's back")

    failures = _failures(home, stores)

    assert list(failures) == [("world_sealed", "w1", None)]
    assert "world w1 was modified after it was sealed" in failures["world_sealed", "w1", None]
    run_cli(home, "train", *cli_args(NAME, FIELDS), "--json")  # the audit rebuilds it to its recorded hash
    assert not _failures(home, stores)


def _rewrite(stores: Stores, rel: str, record: Reward | Trajectory) -> None:
    """Write a record through the artifact store: a valid checksum, as a buggy writer would leave it."""
    stores.artifacts.write(rel, record)


def test_reward_in_range_fails_for_a_reward_that_is_not_finite(home, trained, stores):
    rel = f"rewards/{NAME}/v1/s1/p0-n0"
    reward = stores.trials.reward(NAME, "v1", 1, "p0-n0")
    with _restored(stores.artifacts.path(rel)):
        _rewrite(stores, rel, reward.model_copy(update={"reward": float("inf")}))
        failures = _failures(home, stores)
    unit = f"{NAME}/s1|p0-n0"
    assert failures["reward_in_range", unit, "v1"] == "s1-p0-n0: not finite: reward inf"
    assert ("one_verdict", unit, "v1") not in failures, "the verdict it names is intact"
    assert not _failures(home, stores)


def test_reward_in_range_fails_for_a_score_outside_the_rubric(home, trained, stores):
    rel = f"rewards/{NAME}/{RESCORED}/s0/p1-n0"
    reward = stores.trials.reward(NAME, RESCORED, 0, "p1-n0")
    with _restored(stores.artifacts.path(rel)):
        _rewrite(
            stores, rel, reward.model_copy(update={"score": 3.0, "reward": round(float(reward.verified) + 3.0, 3)})
        )
        failures = _failures(home, stores)
    assert (
        "score 3.0 outside [-0.05, 2.55] of rubric v2-efficiency"
        in failures["reward_in_range", f"{NAME}/s0|p1-n0", RESCORED]
    )
    assert not _failures(home, stores)


@contextmanager
def _sql(stores: Stores, damage: str, undo: str, params: tuple, undo_params: tuple | None = None) -> Iterator[None]:
    """Change one row of a ledger for the block, and change it back afterwards."""
    with stores.db.transaction() as cur:
        cur.execute(damage, params)
        assert cur.rowcount == 1
    try:
        yield
    finally:
        with stores.db.transaction() as cur:
            cur.execute(undo, params if undo_params is None else undo_params)


def _verdict_key(stores: Stores, trial_id: str) -> str:
    with stores.db.transaction() as cur:
        cur.execute(
            "SELECT DISTINCT verdict_key FROM rl_judge_attempts WHERE experiment = %s AND trial_id = %s "
            "AND verdict_key LIKE %s",
            (NAME, trial_id, f"%:{stores.rubrics.get('v1').content_hash}:%"),
        )
        [(key,)] = cur.fetchall()
    return key


def test_one_verdict_fails_when_the_verdict_row_is_modified(home, trained, stores):
    key = _verdict_key(stores, "s0-p1-n0")
    with stores.db.transaction() as cur:
        cur.execute("SELECT verdict FROM rl_verdicts WHERE verdict_key = %s", (key,))
        original = json.dumps(cur.fetchone()[0])
    with _sql(
        stores,
        "UPDATE rl_verdicts SET verdict = jsonb_set(verdict, '{score}', '0.99') WHERE verdict_key = %s",
        "UPDATE rl_verdicts SET verdict = %s::jsonb WHERE verdict_key = %s",
        (key,),
        (original, key),
    ):
        failures = _failures(home, stores)
    assert failures == {
        ("one_verdict", f"{NAME}/s0|p1-n0", "v1"): f"s0-p1-n0: verdict {key} no longer matches its recorded hash"
    }
    assert not _failures(home, stores)


def test_applied_once_fails_when_the_ledger_says_a_step_was_applied_twice(home, trained, stores):
    with _sql(
        stores,
        "UPDATE rl_train_ledger SET version = version + 1 WHERE experiment = %s AND rubric = 'v1' AND step = 1",
        "UPDATE rl_train_ledger SET version = version - 1 WHERE experiment = %s AND rubric = 'v1' AND step = 1",
        (NAME,),
    ):
        failures = _failures(home, stores)
    assert failures == {
        ("applied_once", f"{NAME}/s1", "v1"): "step 1: version 3 after parent version 1; one application makes 2"
    }
    assert not _failures(home, stores)


def test_parent_chain_fails_when_a_step_names_another_parent(home, trained, stores):
    parent = stores.training.get(NAME, "v1", 0).policy_hash
    with _sql(
        stores,
        "UPDATE rl_train_ledger SET parent_hash = 'f' || parent_hash WHERE experiment = %s AND rubric = 'v1' "
        "AND step = 1",
        "UPDATE rl_train_ledger SET parent_hash = substr(parent_hash, 2) WHERE experiment = %s AND rubric = 'v1' "
        "AND step = 1",
        (NAME,),
    ):
        failures = _failures(home, stores)
    assert failures == {("parent_chain", f"{NAME}/s1", "v1"): f"step 1: parent f{parent}, but step 0 produced {parent}"}
    assert not _failures(home, stores)


def test_on_policy_fails_for_a_trajectory_of_another_policy_in_the_batch(home, trained, stores):
    trajectory_rel, reward_rel = f"trajectories/{NAME}/s1/p0-n0", f"rewards/{NAME}/v1/s1/p0-n0"
    trajectory = stores.trials.trajectory(NAME, 1, "p0-n0")
    reward = stores.trials.reward(NAME, "v1", 1, "p0-n0")
    stale = stores.training.get(NAME, "v1", 0).parent_hash  # the initial policy: a rollout one step stale
    with _restored(stores.artifacts.path(trajectory_rel)), _restored(stores.artifacts.path(reward_rel)):
        forged = trajectory.model_copy(update={"policy_hash": stale, "policy_version": 0})
        _rewrite(stores, trajectory_rel, forged)
        _rewrite(stores, reward_rel, reward.model_copy(update={"trajectory_hash": forged.content_hash}))
        failures = _failures(home, stores)
    assert failures["on_policy", f"{NAME}/s1", "v1"] == (
        f"step 1: generated by neither the parent {trajectory.policy_hash} nor a marked generator: s1-p0-n0 by {stale}"
    )
    assert not _failures(home, stores)


def test_a_blocking_reward_check_fails_the_run_that_materializes_a_reward_with_two_verdicts(
    home, trained, stores, instance
):
    from rl_assets.definitions import defs

    key = _verdict_key(stores, "s1-p1-n0")
    second = key.rsplit(":", 1)[0] + ":another-judge"
    with stores.db.transaction() as cur:
        cur.execute(
            "INSERT INTO rl_verdicts (verdict_key, verdict, content_hash, call_id) "
            "SELECT %s, verdict, content_hash, call_id FROM rl_verdicts WHERE verdict_key = %s",
            (second, key),
        )
    partition = dg.MultiPartitionKey({"step": f"{NAME}/s1", "trial": "p1-n0"})
    tags = {EXPERIMENT_TAG: NAME, PARTITION_TAG: str(partition), RUBRIC_TAG: CONFIG.rubric}  # as the driver's run
    judge_job = defs.resolve_job_def("judge_job")
    try:
        result = judge_job.execute_in_process(
            instance=instance, partition_key=partition, raise_on_error=False, tags=tags
        )
    finally:
        with stores.db.transaction() as cur:
            cur.execute("DELETE FROM rl_verdicts WHERE verdict_key = %s", (second,))
    assert not result.success, "a failed blocking check fails its step"
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evaluations["reward_in_range"].passed
    assert not evaluations["one_verdict"].passed and evaluations["one_verdict"].partition == str(partition)
    assert "s1-p1-n0 has 2 verdicts for rubric v1" in evaluations["one_verdict"].description
    assert result.get_asset_materialization_events(), "the materialization is recorded; the check says what is wrong"
    assert not _failures(home, stores)

    # Blocking: the driver does not count that reward, so nothing downstream uses it until a run succeeds.
    (trial,) = [t for s in plan(instance, stores, CONFIG).steps for t in s.trials if t.trial_id == "s1-p1-n0"]
    assert trial.state == "pending" and not plan(instance, stores, CONFIG).done
    again = judge_job.execute_in_process(instance=instance, partition_key=partition, tags=tags)
    assert again.success and plan(instance, stores, CONFIG).done


def test_a_trial_judged_again_after_its_run_ended_keeps_its_recorded_reward_and_counts_no_attempt(
    home, trained, stores, instance
):
    """A run that judged a trial and saved its reward, then died before its materialization was written, leaves
    the trial to be run again: the rerun takes the recorded reward (as a rerun takes a stored rollout), so it
    neither counts a judging attempt nor draws the attempt's faults again, and the judge is not asked."""
    from rl_assets.definitions import defs

    before = stores.attempts.counts(NAME)
    saved = stores.trials.reward(NAME, CONFIG.rubric, 1, "p0-n0")
    partition = dg.MultiPartitionKey({"step": f"{NAME}/s1", "trial": "p0-n0"})
    tags = {EXPERIMENT_TAG: NAME, PARTITION_TAG: str(partition), RUBRIC_TAG: CONFIG.rubric}
    result = defs.resolve_job_def("judge_job").execute_in_process(instance=instance, partition_key=partition, tags=tags)

    assert result.success
    (materialization,) = result.asset_materializations_for_node("rewards")
    assert materialization.metadata["judge_cache"].value == "reused"
    assert materialization.metadata["reward"].value == saved.reward
    assert stores.trials.reward(NAME, CONFIG.rubric, 1, "p0-n0") == saved
    assert stores.attempts.counts(NAME) == before, "no attempt, no judge call"


def test_the_trainer_actor_is_ended_only_once_every_chain_of_its_experiment_is_trained(trained, stores):
    """The chains of an experiment (its rubric's, each re-scoring's) share its trainer actor: the last step of one
    ends it only if no other is still training, and a release that fails leaves the step done, with a warning."""
    from rl_assets.assets.weights import _release_after_last_step

    released: list[str] = []
    warnings: list[str] = []

    class Trainer:
        def __init__(self, fails: bool = False) -> None:
            self.fails = fails

        def release(self, experiment: str) -> bool:
            if self.fails:
                raise ConnectionError("the cluster is unreachable")
            released.append(experiment)
            return True

    context = SimpleNamespace(log=SimpleNamespace(info=lambda line: None, warning=warnings.append))
    last = CONFIG.steps - 1
    _release_after_last_step(context, stores, Trainer(), CONFIG, last - 1)
    assert released == [], "not the chain's last step"
    _release_after_last_step(context, stores, Trainer(), CONFIG, last)
    assert released == [NAME], "v1 and its re-scoring are both trained"

    stores.scorings.request(NAME, "v9-untrained", requested_by="test")
    try:
        _release_after_last_step(context, stores, Trainer(), CONFIG, last)
        _release_after_last_step(context, stores, Trainer(), CONFIG.scored_with(RESCORED), last)
        assert released == [NAME], "a requested re-scoring still training keeps the actor"
    finally:
        with stores.db.transaction() as cur:
            cur.execute("DELETE FROM rl_scorings WHERE experiment = %s AND rubric = 'v9-untrained'", (NAME,))

    _release_after_last_step(context, stores, Trainer(fails=True), CONFIG, last)
    assert len(warnings) == 1 and "the cluster is unreachable" in warnings[0]
