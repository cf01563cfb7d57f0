"""The ``judge`` pool bounds concurrent judge calls across runs, and a killed judge frees its slot.

With the pool set to one slot (as ``dagster instance concurrency set judge 1`` does), three trials judged at
once (threads of one rollout run) are serialized by the pool's slots: their paid calls never overlap, and the
trials that waited say so in the run's log. A judging worker SIGKILLed while it holds the slot does not leave
the pool blocked: the driver that reaps its run frees the slot, and the experiment finishes with the clean
result.
"""

from __future__ import annotations

import json

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.waiting import Waiting
from rl_assets_testkit.expectations import oracle_expectation, table_of
from rl_assets_testkit.kills import Train, Watch, kill, train_args

POOL = "judge"


@pytest.fixture
def one_judge_slot(instance):
    storage = instance.event_log_storage
    storage.set_concurrency_slots(POOL, 1)
    yield storage
    storage.delete_concurrency_limit(POOL)


def _call_intervals(stores, experiment: str) -> list[tuple[float, float]]:
    with stores.db.transaction() as cur:
        cur.execute(
            "SELECT extract(epoch FROM started_at), extract(epoch FROM finished_at) FROM rl_judge_calls "
            "WHERE experiment = %s AND status = 'done' ORDER BY started_at",
            (experiment,),
        )
        return [(float(a), float(b)) for a, b in cur.fetchall()]


def _blocked_messages(instance, watch: Watch) -> list[str]:
    """What the runs logged of judging that waited for the pool (a step's engine event, or a trial's line in a
    rollout run)."""
    messages = []
    for run in watch.runs():
        for record in instance.all_logs(run.run_id):
            if f"blocked by limit for pool {POOL}" in (record.user_message or ""):
                messages.append(record.user_message)
    return messages


def test_one_judge_slot_serializes_calls_and_a_killed_holder_frees_it(home, stores, instance, one_judge_slot):
    config = ExperimentConfig(name="judge-pool", steps=1, worlds=1, prompts=1, samples=3)
    args = train_args(config, {"judge_latency": 1.5, "max_concurrent_trials": 3})
    watch = Watch(stores.db, instance, config)
    train = Train.start(home, args)
    try:
        landed = kill("judge", train, watch, home)  # the holder of the only slot, mid-call
        code, out, err = train.finish()
    finally:
        train.close()
    assert code == 0, err[-3000:]

    result = json.loads(out)
    table, weights = oracle_expectation(config)
    assert table_of(result) == table and result["weights"] == weights
    assert result["counts"]["judge_calls"] == 4, "three verdicts and the one the kill lost"
    calls = _call_intervals(stores, config.name)
    assert len(calls) == 3
    for (_, first_end), (second_start, _) in zip(calls, calls[1:], strict=False):
        assert second_start >= first_end, f"judge calls overlapped: {calls}"
    assert _blocked_messages(instance, watch), "some judging step waited for the pool"
    assert landed.runs_left_active, "the kill left the holder's run active"
    assert one_judge_slot.get_concurrency_info(POOL).claimed_slots == [], "every slot is free again"


def test_a_runs_trials_wait_for_the_judge_pool_in_the_worker_not_on_the_slot_table(instance):
    """Twelve trials of one run judging under a limit of three: the limit is read once, at most three judge at once,
    the run claims three slots of Dagster's table, each handed from a trial that ends to one that waited (the
    others wait in the worker and are woken as a trial ends, without polling the table), the run's log says
    once that trials wait and then that nine waited (not a line each), and every slot is free afterwards."""
    import queue
    import threading
    import uuid

    from rl_assets.assets.rollout_batches import _JudgePool, _QueueLog

    storage = instance.event_log_storage
    storage.set_concurrency_slots(POOL, 3)
    claims, limit_reads, inside, most, mutex = [], [], [0], [0], threading.Lock()

    class Counting:
        """The instance's storage, counting the claims made on its slot table."""

        def __getattr__(self, name: str):
            return getattr(storage, name)

        def claim_concurrency_slot(self, *args, **kwargs):
            claims.append(args)
            return storage.claim_concurrency_slot(*args, **kwargs)

        def get_pool_limits(self):
            limit_reads.append(1)
            return storage.get_pool_limits()

    lines: queue.Queue = queue.Queue()
    pool = _JudgePool(Counting(), f"test-{uuid.uuid4().hex[:8]}")
    release = threading.Event()

    def judge(i: int) -> None:
        with pool.slot(f"s0-p{i}-n0", _QueueLog(lines)):
            with mutex:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            release.wait(timeout=30)
            with mutex:
                inside[0] -= 1

    try:
        threads = [threading.Thread(target=judge, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        Waiting(timeout_s=30, interval_s=0.01).until("three trials judging at once", lambda: inside[0] == 3)
        Waiting(timeout_s=30, interval_s=0.01).until("the other nine waiting", lambda: pool._waiting == 9)
        release.set()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        pool.close()
    finally:
        storage.delete_concurrency_limit(POOL)
    assert most[0] == 3
    assert len(claims) == 3, f"{len(claims)} claims on the slot table for 12 trials under a limit of 3"
    assert len(limit_reads) == 1, f"the pool's limit read {len(limit_reads)} times for 12 trials, not once a run"
    logged = []
    while not lines.empty():
        logged.append(lines.get_nowait()[1])
    assert len(logged) == 2, logged
    assert "blocked by limit for pool" in logged[0] and "with the trials of this run that reach the limit" in logged[0]
    assert logged[1] == f"judging: 9 trial(s) of this run waited for a slot of pool {POOL}"
    assert storage.get_concurrency_info(POOL).claimed_slots == []


def test_a_slot_goes_to_another_runs_waiting_step_before_this_runs_next_trial(instance):
    """Limit one; a run's first trial judges, its two others wait in the worker, and a step of another run waits in
    Dagster's table: the trial that ends frees its slot for that step (first come, first served) instead of handing
    it to its run's next trial, which judges only once that step has freed it; the last trial then takes the lane
    of the one before it (two claims for three trials), and every slot is free afterwards."""
    import queue
    import threading
    import uuid

    from rl_assets.assets.rollout_batches import _JudgePool, _QueueLog

    storage = instance.event_log_storage
    storage.set_concurrency_slots(POOL, 1)
    run, other = f"test-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    claims: list[str] = []

    class Counting:
        def __getattr__(self, name: str):
            return getattr(storage, name)

        def claim_concurrency_slot(self, pool, run_id, step_key, *args, **kwargs):
            if step_key not in claims:
                claims.append(step_key)
            return storage.claim_concurrency_slot(pool, run_id, step_key, *args, **kwargs)

    lines: queue.Queue = queue.Queue()
    pool = _JudgePool(Counting(), run)
    order: list[str] = []
    go = {i: threading.Event() for i in range(3)}

    def judge(i: int) -> None:
        with pool.slot(f"s0-p{i}-n0", _QueueLog(lines)):
            order.append(f"trial {i}")
            go[i].wait(timeout=60)

    def holders() -> list[str]:
        return [s.run_id for s in storage.get_concurrency_info(POOL).claimed_slots]

    wait = Waiting(timeout_s=30, interval_s=0.01)
    threads = [threading.Thread(target=judge, args=(i,)) for i in range(3)]
    try:
        threads[0].start()
        wait.until("the first trial judging", lambda: order == ["trial 0"])
        for t in threads[1:]:
            t.start()
        wait.until("the two others waiting in the worker", lambda: pool._waiting == 2)
        assert not storage.claim_concurrency_slot(POOL, other, "rewards[x]").is_claimed  # waits in the table
        go[0].set()
        wait.until(
            "the other run's step given the slot",
            lambda: storage.claim_concurrency_slot(POOL, other, "rewards[x]").is_claimed,
        )
        assert order == ["trial 0"] and holders() == [other]
        storage.free_concurrency_slot_for_step(other, "rewards[x]")
        wait.until("a second trial judging", lambda: len(order) == 2)
        go[1].set()
        go[2].set()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        pool.close()
        assert len(order) == 3
        assert len(claims) == 2, f"lanes claimed: {claims}"
        assert holders() == []
    finally:
        for event in go.values():
            event.set()
        storage.free_concurrency_slot_for_step(other, "rewards[x]")
        storage.delete_concurrency_limit(POOL)
