"""The spec oracle against every number of docs/reference-workload.md (no home, no services: milliseconds)."""

from __future__ import annotations

import hashlib
import random

import pytest

from rl_assets_testkit import oracle as o

REF = o.Config()
SANDBOX_025 = ["s0-p2-n1", "s1-p0-n0", "s1-p2-n0", "s1-p2-n1", "s2-p1-n1", "s2-p2-n0"]
JUDGE_03 = ["s0-p0-n0", "s0-p1-n0", "s1-p0-n0", "s2-p0-n1", "s2-p1-n1", "s2-p2-n0"]


def test_the_oracle_imports_nothing_of_the_package():
    source = open(o.__file__).read()
    assert "rl_assets" not in source.replace("``rl_assets``", "")
    imported = {line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imported <= {"__future__", "hashlib", "json", "random", "dataclasses", "typing"}


def test_seed_is_the_first_8_hex_digits_of_sha256():
    assert o.seed("world", "w0") == int(hashlib.sha256(b"world|w0").hexdigest()[:8], 16) == 330903403
    assert o.seed("judge", "s0-p0-n0", "v1") == int(hashlib.sha256(b"judge|s0-p0-n0|v1").hexdigest()[:8], 16)


def test_worlds_have_eight_documents_and_one_secret_in_the_doc_the_priors_learn():
    docs = o.world_documents("w1")
    assert sorted(docs) == [f"docs/doc_{i}.txt" for i in range(8)]
    assert docs["docs/doc_4.txt"] == "title: report 4 for w1\nowner: team-1\npages: 14\n"
    assert all(sum("secret:" in t for t in o.world_documents(w).values()) == 1 for w in ("w0", "w1", "w2"))
    # The final priors of the spec grow at w0/doc 1, w1/doc 0, w2/doc 1: the secret documents.
    assert [o.world_secret(w)[0] for w in ("w0", "w1", "w2")] == [1, 0, 1]
    secret_doc, secret = o.world_secret("w1")
    assert docs[f"docs/doc_{secret_doc}.txt"].endswith(f"secret: {secret}\n")
    assert secret.startswith("w1-secret-") and len(secret) == len("w1-secret-") + 6


def test_trials_are_in_canonical_order_and_map_prompts_to_worlds():
    config = o.Config(prompts=12, samples=2, worlds=5)
    ids = config.trial_ids(0)
    assert ids == sorted(ids) and len(ids) == 24 and ids[:3] == ["s0-p0-n0", "s0-p0-n1", "s0-p1-n0"]
    assert ids.index("s0-p10-n0") < ids.index("s0-p2-n0"), "string order, as 'sorted by trial id' says"
    assert config.world_of("s0-p11-n0") == "w1" and config.world_of("s3-p4-n1") == "w4"


def test_injected_fault_lists_of_the_specification():
    trials = REF.all_trial_ids()
    assert [t for t in trials if o.sandbox_flakes(t, 0.25)] == SANDBOX_025
    assert [t for t in trials if o.judge_flakes(t, 0.3)] == JUDGE_03
    # With retries left, no fault is final: the chaos row of the spec is the clean run.
    assert o.failed_for_good(REF, o.Faults(flaky_trial_rate=0.25, judge_flake_rate=0.3)) == frozenset()
    assert sorted(o.failed_for_good(REF, o.Faults(flaky_trial_rate=0.25, generate_retries=0))) == SANDBOX_025
    assert sorted(o.failed_for_good(REF, o.Faults(judge_flake_rate=0.3, judge_retries=0))) == JUDGE_03


def test_clean_run_gives_the_expected_table_and_final_priors():
    run = o.train(REF)
    assert run.table() == [(1.601, 4.67, 6), (2.323, 2.17, 6), (2.352, 1.67, 6)]
    priors = run.policy.priors
    assert priors["w0"][1] == pytest.approx(23.936)
    assert priors["w1"][0] == pytest.approx(24.5)
    assert priors["w2"][1] == pytest.approx(28.984)
    touched = {(w, i) for w, p in priors.items() for i, x in enumerate(p) if x != 1.0}
    assert touched == {("w0", 1), ("w1", 0), ("w2", 1)}
    assert run.policy.version == 3 and (run.generated, run.judge_calls) == (18, 18)
    assert [t.policy_version for t in run.trajectories.values()] == [0] * 6 + [1] * 6 + [2] * 6


def test_rescoring_judges_the_same_trajectories_and_trains_a_second_chain():
    trained = o.train(REF)
    rescored = o.rescore(trained, o.V2_EFFICIENCY)
    assert rescored.table() == [(2.391, 4.67, 6), (3.258, 2.17, 6), (3.343, 1.67, 6)]
    assert rescored.trajectories == trained.trajectories and rescored.generated == 0 and rescored.judge_calls == 18
    assert o.rescore(rescored, o.V1).table() == trained.table(), "going back to v1 gives the clean row"


def test_forking_reuses_step_0_and_regenerates_under_the_new_policy():
    trained = o.train(REF)
    forked = o.fork(trained, o.V2_EFFICIENCY)
    assert forked.table() == [(2.391, 4.67, 6), (3.299, 1.83, 6), (3.343, 1.67, 6)]
    assert (forked.reused, forked.generated, forked.judge_calls) == (6, 12, 18)
    step0 = REF.trial_ids(0)
    assert all(forked.trajectories[t] is trained.trajectories[t] for t in step0)
    assert forked.table() == o.train(REF, o.V2_EFFICIENCY).table(), "identity decides: a fork is a fresh run"
    # With lr 0 the policy never changes, so a fork reuses every rollout.
    still = o.Config(lr=0.0)
    assert o.fork(o.train(still), o.V2_EFFICIENCY).reused == 18


def test_the_judge_takes_any_rubric_weights():
    trajectory = o.train(REF).trajectories["s1-p0-n1"]
    correct = 1.0 if o.verified(trajectory) else 0.0
    efficiency = max(0.0, 1 - (len(trajectory.turns) - 1) / 8)
    tidy = 1.0 if trajectory.files_written == ("answer.txt",) else 0.0
    for name, weights in [("zero", (0.0, 0.0, 0.0)), ("v3", (1.0, 0.5, 0.2)), ("odd", (0.25, 2.0, 1.5))]:
        noise = random.Random(o.seed("judge", trajectory.trial_id, name)).uniform(-0.05, 0.05)
        expected = round(weights[0] * correct + weights[1] * efficiency + weights[2] * tidy + noise, 3)
        assert o.judge_score(trajectory, o.Rubric(name, *weights)) == expected
    reward = o.reward_of(trajectory, o.Rubric("v3", 1.0, 0.5, 0.2))
    assert reward.reward == round(correct + reward.score, 3)
    assert reward.found_doc == next(t.doc for t in trajectory.turns if t.found)
    assert o.train(REF, o.Rubric("v3", 1.0, 0.5, 0.2)).table() != o.train(REF).table()


def test_the_agent_reads_at_most_max_turns_and_answers_only_what_it_found():
    run = o.train(o.Config(max_turns=1))
    for t in run.trajectories.values():
        assert len(t.turns) == 1
        assert (t.answer != "") == t.turns[0].found and t.files_written[0] == "answer.txt"
    assert any(t.files_written == ("answer.txt", "scratch.tmp") for t in o.train(REF).trajectories.values())


def test_the_update_is_taken_in_trial_id_order():
    batch = o.train(REF).steps[0].batch
    shuffled = list(reversed(batch))
    policy = o.initial_policy(REF)
    assert o.train_step(policy, shuffled, 2.0) == o.train_step(policy, batch, 2.0)
    assert o.train_step(policy, [], 2.0) == o.Policy(1, policy.priors), "an empty step still bumps the version"


def test_failed_trials_are_absent_and_mask_group_drops_their_prompt_group():
    failed = frozenset(SANDBOX_025)
    skip = o.train(REF, o.V1, failed)
    assert [len(s.batch) for s in skip.steps] == [5, 3, 4]
    assert not failed & {r.trial_id for s in skip.steps for r in s.batch}
    masked = o.train(o.with_policy(REF, "mask-group"), o.V1, failed)
    assert [[r.trial_id for r in s.batch] for s in masked.steps] == [
        ["s0-p0-n0", "s0-p0-n1", "s0-p1-n0", "s0-p1-n1"],
        ["s1-p1-n0", "s1-p1-n1"],
        ["s2-p0-n0", "s2-p0-n1"],
    ]
    assert masked.table() == [(1.275, 4.5, 4), (2.321, 2.0, 2), (2.285, 2.5, 2)]
    assert skip.table() == [(1.478, 4.4, 5), (2.304, 1.67, 3), (2.341, 1.75, 4)]
    # Every prompt group of a step gone: no batch, no mean, and the version still goes up.
    one_step = o.with_policy(o.Config(steps=1, prompts=2, samples=2), "mask-group")
    everything = o.train(one_step, o.V1, frozenset({"s0-p0-n1", "s0-p1-n0"}))
    assert everything.table() == [(None, None, 0)] and everything.policy.version == 1
