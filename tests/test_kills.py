"""External SIGKILLs of real processes mid-run, each followed by a plain rerun of the same ``train`` command.

After every kill the final table and weights equal the oracle's clean result, and the ledgers show that no
completed unit ran again: one completed rollout and one recorded verdict per trial, one ledger row per step;
the only extra judge calls are those a process died during, counted with their cause. Kill points are found
by polling durable state (see :mod:`rl_assets_testkit.kills`), never by sleeping.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest
from dagster import DagsterRunStatus

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.home.layout import Home
from rl_assets.home.services.ray_head import LocalRayHead
from rl_assets.home.settings import RAY_ADDRESS_ENV
from rl_assets_testkit.expectations import oracle_expectation, run_cli, table_of
from rl_assets_testkit.kills import (
    DIED_DURING_CALL,
    REAPED_MESSAGE,
    Evidence,
    Train,
    Watch,
    actor_process,
    alive,
    driver_of,
    kill,
    random_kill_point,
    ray_head_processes,
    run_train,
    sandboxes_of,
    sigkill,
    target_worker,
    train_args,
    wait_for,
)

TREE_KILL_SEED = 20260302
"""Seeds the tree kill's point; a different seed lands elsewhere, and every point must give the same result."""


@pytest.fixture
def watch_of(stores, instance):
    def make(config: ExperimentConfig) -> Watch:
        return Watch(stores.db, instance, config)

    return make


@pytest.fixture
def started():
    """Trains started by a test, always ended and cleaned up (even when an assertion fails mid-test)."""
    trains: list[Train] = []

    def start(home: Path, args: list[str]) -> Train:
        trains.append(Train.start(home, args))
        return trains[-1]

    yield start
    for train in trains:
        train.close()


def finished(train: Train) -> dict:
    code, out, err = train.finish()
    assert code == 0, f"train exited {code}:\n{err[-3000:]}"
    return json.loads(out)


def rerun(home: Path, args: list[str]) -> dict:
    code, out, err = run_train(home, args)
    assert code == 0, f"the rerun exited {code}:\n{err[-3000:]}"
    return json.loads(out)


def assert_clean(result: dict, config: ExperimentConfig) -> None:
    table, weights = oracle_expectation(config)
    assert table_of(result) == table
    assert result["weights"] == weights


def assert_nothing_redone(evidence: Evidence, result: dict) -> None:
    assert evidence.problems() == []
    counts = result["counts"]
    assert counts["train_applications"] == evidence.steps
    assert counts["judge_calls"] == evidence.trials + evidence.claimed_calls
    assert counts["generate_attempts"] == evidence.trials + evidence.unfinished_generations


def assert_rerun_does_nothing(home: Path, args: list[str], result: dict) -> None:
    """A plain rerun of a finished experiment prints the same result, counts included: it executes nothing."""
    assert rerun(home, args) == result


def assert_reaped(watch: Watch, run_ids: list[str]) -> None:
    """Runs a killed worker left active were marked failed by a later driver, saying why."""
    for run_id in run_ids:
        assert watch.run_status(run_id) == DagsterRunStatus.FAILURE, run_id
        assert REAPED_MESSAGE in watch.failure_message(run_id), run_id


def test_sigkill_of_the_whole_train_tree_at_a_seeded_point(home, watch_of, started):
    """CLI, daemon (code server, forkserver), run workers and sandboxes all die at once; a rerun finishes the job."""
    config = ExperimentConfig(name="kill-tree", steps=2, worlds=1, prompts=1, samples=2)
    args = train_args(config, {"tool_latency": 0.2, "judge_latency": 0.5})
    watch = watch_of(config)
    point = random_kill_point(random.Random(TREE_KILL_SEED), config)
    train = started(home, args)
    landed = kill("tree", train, watch, home, after_progress=point)
    assert train.proc.returncode == -9 and len(landed.pids) >= 2, landed  # the CLI and at least the daemon

    result = rerun(home, args)
    assert_clean(result, config)
    evidence = Evidence.of(watch)
    assert_nothing_redone(evidence, result)
    assert result["counts"]["driver_attempts"] == 2, "the killed driver and the rerun's"
    assert_reaped(watch, landed.runs_left_active)
    assert_rerun_does_nothing(home, args, result)


def test_sigkill_of_a_rollout_worker_loses_only_the_trials_in_flight(home, watch_of, started):
    """A step's trials share one rollout worker. Killed when some trials have ended and others are mid-rollout,
    it loses exactly the attempts in flight (their sandboxes die with it): the ended trials are never run again,
    the lost ones are rolled out once more in a new rollout run, and the result is the oracle's."""
    config = ExperimentConfig(name="kill-rollout", steps=1, worlds=2, prompts=4, samples=2)
    args = train_args(config, {"tool_latency": 0.5})  # trials read 1 to 6 documents: they end at different times
    watch = watch_of(config)
    train = started(home, args)

    def mid_step():
        target = target_worker(watch, "trial")
        return target if target is not None and watch.rewarded() else None

    worker, run_id, _ = wait_for(
        mid_step, "a rollout worker with trials ended and others in flight", while_running=train.proc
    )
    sandboxes = sandboxes_of(worker)
    sigkill([worker])
    # Read at once: nothing of this run can change any more, and the driver relaunches only after run
    # monitoring has failed the run.
    ended = watch.rewarded()
    lost = sorted(t for t, _ in watch.unfinished("rl_generation_attempts"))
    wait_for(lambda: not any(alive(p) for p in sandboxes), "the sandboxes to die with their worker (no orphan)")
    assert ended and lost, (ended, lost)

    result = finished(train)
    assert_clean(result, config)
    evidence = Evidence.of(watch)
    assert_nothing_redone(evidence, result)
    assert evidence.unfinished_generations == len(lost), "exactly the attempts in flight were lost"
    assert sorted(t for t, _, outcome in watch.generation_attempts() if outcome == "running") == lost
    attempts = Counter(t for t, _, _ in watch.generation_attempts())
    ended_ids = {watch.trial_id(key) for key in ended}
    assert all(attempts[t] == 1 for t in ended_ids), "a trial that ended before the kill never ran again"
    assert all(attempts[t] == 2 for t in lost), "each lost trial was rolled out once more"
    for asset in ("trajectories", "rewards"):  # not even re-materialized from the rollout cache and verdict ledger
        assert {key: watch.materializations(asset, key) for key in ended} == dict.fromkeys(ended, 1), asset
    assert_reaped(watch, [run_id])
    assert_rerun_does_nothing(home, args, result)


def test_sigkill_of_a_judging_worker_mid_call(home, watch_of, started):
    """The calls in flight were billed and their verdicts lost: exactly one extra call each, counted with their
    cause. (The step's two trials share a rollout run, so both may be mid-call when its worker dies.)"""
    config = ExperimentConfig(name="kill-judge", steps=1, worlds=1, prompts=1, samples=2)
    args = train_args(config, {"judge_latency": 3.0})
    watch = watch_of(config)
    train = started(home, args)
    landed = kill("judge", train, watch, home)
    claimed = [t for t, _, status, _ in watch.judge_calls() if status == "claimed"]
    assert landed.trial_id in claimed, "the kill landed inside the call: its claim is still open"
    lost = len(claimed)

    result = finished(train)
    assert_clean(result, config)
    evidence = Evidence.of(watch)
    assert_nothing_redone(evidence, result)
    assert evidence.claimed_calls == lost and result["counts"]["judge_calls"] == 2 + lost
    assert result["counts"]["generate_attempts"] == 2, "the killed trials' rollouts were reused, not regenerated"
    assert_reaped(watch, landed.runs_left_active)

    report = json.loads(run_cli(home, "report", "--experiment", config.name, "--json").stdout)
    assert report["judge_calls"]["calls"] == 2 + lost and report["judge_calls"]["verdicts"] == 2
    assert report["judge_calls"]["extra_calls"] == lost
    assert report["judge_calls"]["extra_call_causes"] == {DIED_DURING_CALL: lost}
    assert_rerun_does_nothing(home, args, result)


def test_sigkill_of_the_trainer_actor_between_steps(home, watch_of, started):
    """A new actor is restored from the last checkpoint: no step lost, none applied twice."""
    config = ExperimentConfig(name="kill-actor", steps=2, worlds=1, prompts=1, samples=2)
    args = train_args(config, {"tool_latency": 0.2})
    watch = watch_of(config)
    train = started(home, args)
    step0 = wait_for(lambda: watch.trained(), "step 0 trained", while_running=train.proc)[0]
    actor = actor_process(step0[1])
    sigkill([actor])
    assert len(watch.trained()) == 1, "the kill landed between the steps"

    result = finished(train)
    assert_clean(result, config)
    assert_nothing_redone(Evidence.of(watch), result)
    pids = [s["actor_pid"] for s in result["steps"]]
    assert pids[0] == step0[1] and pids[1] != step0[1], "step 1 was applied by a new actor"
    assert watch.trained()[0] == step0, "step 0's ledger row is untouched"
    assert_rerun_does_nothing(home, args, result)


def test_sigkill_of_the_ray_head_mid_run(home, watch_of, started):
    """The driver restarts the home's head before the next train run; the new actor resumes from the checkpoint."""
    config = ExperimentConfig(name="kill-head", steps=2, worlds=1, prompts=1, samples=2)
    args = train_args(config, {"tool_latency": 0.2})
    watch = watch_of(config)
    head = LocalRayHead(Home(home))
    address = head.address()
    train = started(home, args)
    try:
        # Step 0 trained and its run finished (not mid-teardown on the head), step 1 rolling out: mid-run.
        step0 = wait_for(
            lambda: watch.trained() and not [r for r in watch.active_runs() if r.job_name == "train_job"],
            "step 0 trained",
            while_running=train.proc,
        )
        step0 = watch.trained()[0]
        procs = ray_head_processes(home)
        assert step0[1] in {p.pid for p in procs}, "the actor is one of the head's processes"
        assert any(p.name() == "gcs_server" for p in procs), "the head's GCS is one of them"
        # sigkill returns once every one is gone: the head is down. Not asserted afterwards: step 1's two
        # trials may be rolled out by then, and the driver restarts the head before training it.
        killed = set(sigkill(procs))

        result = finished(train)
        # Only the driver can have restarted it: the CLI checked its services before the kill.
        assert head.is_running() and head.address() == address == os.environ[RAY_ADDRESS_ENV]
        assert not killed & {p.pid for p in ray_head_processes(home)}, "a new head"
        assert_clean(result, config)
        assert_nothing_redone(Evidence.of(watch), result)
        assert result["steps"][1]["actor_pid"] != step0[1]
        assert_rerun_does_nothing(home, args, result)
    finally:
        head.ensure_running()  # later tests of the session need a head, on the address they were given
        assert head.address() == address


def test_a_run_left_started_by_a_killed_worker_is_reaped_by_the_next_driver(home, watch_of, started):
    """Daemon and worker die together: the run stays STARTED until the next daemon fails it and runs it again."""
    config = ExperimentConfig(name="kill-reap", steps=1, worlds=1, prompts=1, samples=2)
    args = train_args(config, {"tool_latency": 0.5})
    watch = watch_of(config)
    train = started(home, args)
    worker, run_id, trial_id = wait_for(
        lambda: target_worker(watch, "trial"), "a rollout with its sandbox up", while_running=train.proc
    )
    driver = driver_of(home)
    assert driver is not None
    sigkill([driver, worker])
    assert watch.run_status(run_id) == DagsterRunStatus.STARTED, "nothing but the daemon marks a dead run"

    result = finished(train)  # the CLI starts the daemon again; its run monitoring fails the run
    assert result["counts"]["driver_attempts"] == 2
    assert_reaped(watch, [run_id])
    assert watch.trial_key(trial_id) in watch.rewarded(), "the unit was finished"
    assert_clean(result, config)
    assert_nothing_redone(Evidence.of(watch), result)
    assert_rerun_does_nothing(home, args, result)
