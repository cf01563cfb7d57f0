"""A task experiment killed mid-run: the rerun repeats only the model calls the kill cut off.

The whole ``train`` tree (CLI, driver, run workers, sandboxes) is SIGKILLed once some trials have
answered model calls; a plain rerun finishes the experiment. Every answered request is in the cost
ledger as it arrives, so the bill is exact: the server answered exactly what the ledger holds, and
beyond a clean run's calls only those of attempts the kill cut off (and the few answered as it landed).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from rl_assets.domain.runtime import ExecutionSettings
from rl_assets_testkit.example_solutions import POLICY_MODEL, SOLUTIONS, script
from rl_assets_testkit.kills import Train, Watch, kill_train_tree, run_train, wait_for
from rl_assets_testkit.served_model import ServedModel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"
NAME = "tasks-killed"


def test_a_sigkilled_task_run_pays_again_only_for_the_calls_in_flight(home, stores, instance, tmp_path):
    with ServedModel(script(), tmp_path) as server:
        args = [
            *("--experiment", NAME, "--tasks", str(EXAMPLES), "--policy-url", server.base_url),
            *("--policy-model", POLICY_MODEL, "--steps", "2", "--samples", "2", "--max-turns", "8"),
        ]
        train = Train.start(home, args)
        try:
            wait_for(lambda: stores.model_calls.calls(NAME, "policy") >= 12, "12 answered calls", 300, train.proc)
            watch = Watch(stores.db, instance, stores.experiments.get(NAME))
            kill_train_tree(train, watch, home)
        finally:
            train.close()
        billed_at_kill = stores.model_calls.calls(NAME, "policy")
        code, out, err = run_train(home, args)
        assert code == 0, err[-3000:]
        answered = server.stats()["answered"][POLICY_MODEL]
    result = json.loads(out)
    assert all(t["reward"] == 1.0 for t in result["trials"])
    clean_calls = sum(len(SOLUTIONS[t["task"]]) for t in result["trials"])
    assert billed_at_kill >= 12
    # A call answered while the kill landed, before its worker could record it, is the one thing unbilled:
    # at most one per trial worker running then.
    unrecorded = answered - result["counts"]["policy_calls"]
    assert 0 <= unrecorded <= ExecutionSettings().max_concurrent_trials
    assert answered - clean_calls == stores.model_calls.wasted_calls(NAME) + unrecorded, "only cut-off calls repeat"


def test_an_attempt_cut_off_after_storing_its_rollout_is_not_wasted_once_it_is_reused(stores):
    """A kill between storing a rollout and calling its attempt ok: the rerun reuses the rollout (no call is
    asked again), so the attempt is settled ok then, and its calls are not counted as wasted."""
    name = f"cut-{uuid.uuid4().hex[:8]}"
    cut = stores.attempts.start_generation(name, "s0-a-n0", 0, "rollout-1", "none")
    other = stores.attempts.start_generation(name, "s0-a-n0", 1, "rollout-2", "none")  # another identity
    for attempt in (cut, cut, cut, other):
        stores.model_calls.record(name, "s0-a-n0", "policy", "m", 10, 5, attempt)
    assert stores.model_calls.wasted_calls(name) == 4
    stores.attempts.settle_cut_off(name, "s0-a-n0", "rollout-1")  # what reusing rollout-1 does
    assert stores.model_calls.wasted_calls(name) == 1, "the other identity's attempt was not reused"
