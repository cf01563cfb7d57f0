"""The reference workload itself, against the numbers of reference-workload.md."""

import pytest
from pydantic import ValidationError

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.oracle import oracle_run
from rl_assets.domain.runtime import FaultConfig
from rl_assets.domain.seeding import rng, seed
from rl_assets.domain.world import world_documents, world_secret


def test_seed_is_first_8_hex_digits_of_sha256():
    import hashlib

    assert seed("world", "w0") == int(hashlib.sha256(b"world|w0").hexdigest()[:8], 16)


def test_world_has_eight_docs_and_one_secret():
    docs = world_documents("w1")
    secret_doc, secret = world_secret("w1")
    assert sorted(docs) == [f"docs/doc_{i}.txt" for i in range(8)]
    assert docs[f"docs/doc_{secret_doc}.txt"].endswith(f"secret: {secret}\n")
    assert sum("secret:" in text for text in docs.values()) == 1
    assert docs["docs/doc_4.txt"].startswith("title: report 4 for w1\nowner: team-1\npages: 14\n")


def test_clean_reference_table_and_priors():
    steps, policy = oracle_run(ExperimentConfig(name="ref"))
    assert [(s.mean_reward, s.mean_turns) for s in steps] == [(1.601, 4.67), (2.323, 2.17), (2.352, 1.67)]
    assert policy.priors["w0"][1] == pytest.approx(23.936)
    assert policy.priors["w1"][0] == pytest.approx(24.5)
    assert policy.priors["w2"][1] == pytest.approx(28.984)
    touched = {(w, i) for w, p in policy.priors.items() for i, x in enumerate(p) if x != 1.0}
    assert touched == {("w0", 1), ("w1", 0), ("w2", 1)}


def test_forked_v2_table():
    steps, _ = oracle_run(ExperimentConfig(name="fork", rubric="v2-efficiency"))
    assert [(s.mean_reward, s.mean_turns) for s in steps] == [(2.391, 4.67), (3.299, 1.83), (3.343, 1.67)]


def test_fault_draws_match_the_specification():
    config = ExperimentConfig(name="ref")
    trials = [t.trial_id for s in range(3) for t in config.trials(s)]
    flaky = [t for t in trials if rng("trial", t).random() < 0.25]
    assert flaky == ["s0-p2-n1", "s1-p0-n0", "s1-p2-n0", "s1-p2-n1", "s2-p1-n1", "s2-p2-n0"]
    faults = FaultConfig(judge_flake_rate=0.3)
    assert [t for t in trials if faults.judge_flakes(t)] == [
        "s0-p0-n0",
        "s0-p1-n0",
        "s1-p0-n0",
        "s2-p0-n1",
        "s2-p1-n1",
        "s2-p2-n0",
    ]


def test_trials_are_sorted_by_trial_id_and_map_prompts_to_worlds():
    config = ExperimentConfig(name="x", prompts=12, samples=1, worlds=5)
    ids = [t.trial_id for t in config.trials(0)]
    assert ids == sorted(ids)
    assert {t.trial_id: t.world_id for t in config.trials(0)}["s0-p11-n0"] == "w1"


@pytest.mark.parametrize(
    "field, value",
    [("worlds", 0), ("steps", -1), ("samples", 0), ("lr", -0.5), ("rubric", "no spaces allowed"), ("name", "Bad|Name")],
)
def test_bad_config_is_rejected(field, value):
    with pytest.raises((ValidationError, ValueError)):
        ExperimentConfig(**{"name": "ok", field: value})


def test_config_hash_identifies_the_config():
    assert ExperimentConfig(name="a").config_hash == ExperimentConfig(name="a").config_hash
    assert ExperimentConfig(name="a").config_hash != ExperimentConfig(name="a", lr=1.0).config_hash
