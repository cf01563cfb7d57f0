"""GRPO on the tiny causal LM, in this process with real torch: advantages, masks, the loss, one step,
checkpoints, and a restored trainer writing the bytes a warm one does."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rl_assets.workloads.grpo import checkpoint
from rl_assets.workloads.grpo.advantages import EPS, batch_advantages, group_advantages
from rl_assets.workloads.grpo.loss import batch_loss, grpo_step, padded, token_logprobs
from rl_assets.workloads.grpo.model import build_tiny, load_base, save_tiny
from rl_assets.workloads.grpo.samples import Sample, trajectory_samples
from rl_assets.workloads.grpo.tokenizer import ByteChatTokenizer
from rl_assets.workloads.grpo.trainer import SERVED_MODEL, GRPOTrainer
from rl_assets.workloads.seams import TrainingWorkspace
from rl_assets_testkit.chat_batches import GRPO_LR, STEP_REWARDS, chat_trajectory, grpo_config, store_step

LR = GRPO_LR


def test_advantages_are_group_relative_and_a_group_without_spread_gives_none(tmp_path):
    got = group_advantages([1.0, 0.0, 0.5, 2.0, 1.0, 1.0], ["a", "a", "a", "b", "c", "c"])
    # group a: mean 0.5, sample std sqrt((0.25 + 0.25 + 0) / 2) = 0.5; b has one sample; c has no spread
    assert got == pytest.approx([0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS), 0.0, 0.0, 0.0, 0.0], abs=1e-12)
    # a step's batch is grouped by task: greet-n0..n2 (1, 0, 0.5) and sum-n0, n1 (0, 1, std sqrt(0.5))
    batch = store_step(tmp_path, "g", 0, STEP_REWARDS[0])
    assert [r.trial_id for r in batch] == ["s0-greet-n0", "s0-greet-n1", "s0-greet-n2", "s0-sum-n0", "s0-sum-n1"]
    s = math.sqrt(0.5)
    assert batch_advantages(batch) == pytest.approx(
        [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS), 0.0, -0.5 / (s + EPS), 0.5 / (s + EPS)], abs=1e-12
    )


def test_the_loss_mask_covers_response_tokens_only():
    a = Sample((1, 2, 3), (4, 5), 1.0, None, recorded=False, truncated=False)
    b = Sample((7,), (8, 9, 10), -1.0, None, recorded=False, truncated=False)
    ids, attention, mask = padded([a, b], pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 4, 5], [7, 8, 9, 10, 0]]
    assert attention.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    # position i predicts token i + 1: a's response tokens 4, 5 are predicted at 2, 3; b's 8, 9, 10 at 0, 1, 2
    assert mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 0]]


def test_tool_output_and_the_prompt_are_never_response_tokens():
    tokenizer = ByteChatTokenizer()
    trajectory = chat_trajectory("s0-greet-n0", "yes")
    first, second = trajectory_samples(trajectory, 0.5, tokenizer, SERVED_MODEL, max_tokens=2048)
    assert not first.recorded and first.old_logprobs is None  # the stand-in's ids are not this model's
    assert bytes(first.response_ids[1:-1]) == b'bash {"command": "ls"}'
    assert bytes(second.response_ids[:-1]) == b"yes" and second.response_ids[-1] == 258  # <|eos|>
    assert b"TOOL OUTPUT" in bytes(i for i in second.prompt_ids if i < 256)
    for sample in (first, second):
        assert b"TOOL OUTPUT" not in bytes(i for i in sample.response_ids if i < 256)
        assert b"write the answer" not in bytes(i for i in sample.response_ids if i < 256)
    own = chat_trajectory("s0-greet-n0", "yes", model=SERVED_MODEL, ids=True)
    recorded = trajectory_samples(own, 0.5, tokenizer, SERVED_MODEL, max_tokens=2048)
    assert [s.response_ids for s in recorded] == [tuple(b"ls"), tuple(b"yes")]
    assert all(s.recorded and s.old_logprobs == (-5.5,) * len(s.response_ids) for s in recorded)
    cut = trajectory_samples(own, 0.5, tokenizer, SERVED_MODEL, max_tokens=4)
    assert [(len(s.prompt_ids), len(s.response_ids), s.truncated) for s in cut] == [(2, 2, True), (1, 3, True)]


def _toy_samples(model) -> list[Sample]:
    """Two rewarded and one punished answer, their rollout logprobs the model's own (ratio 1)."""
    shapes = [
        ((257, 260, *b"hi", 258, 261), tuple(b"yes") + (258,), 1.0),
        ((257, 260, *b"yo", 258, 261), tuple(b"no") + (258,), -1.0),
    ]
    samples = []
    for prompt, response, advantage in shapes:
        ids, attention, mask = padded([Sample(prompt, response, 0.0, None, False, False)], 256)
        with torch.no_grad():
            logp = token_logprobs(model, ids, attention)[0, len(prompt) - 1 :]
        samples.append(Sample(prompt, response, advantage, tuple(logp.tolist()), recorded=True, truncated=False))
    return samples


def test_one_step_changes_the_weights_and_lowers_the_loss():
    torch.use_deterministic_algorithms(True)
    model = build_tiny()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, foreach=False)
    samples = _toy_samples(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    # at ratio 1 the loss is -sum(A * tokens) / tokens = -(1 * 4 - 1 * 3) / 7
    assert batch_loss(model, samples, 256, clip=0.2, micro_batch=1) == pytest.approx(-1 / 7, abs=1e-7)
    result = grpo_step(model, optimizer, samples, 256, lr=LR, clip=0.2, micro_batch=1)
    assert result.loss == pytest.approx(-1 / 7, abs=1e-7) and result.tokens == 7 and result.clipped_fraction == 0
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    assert batch_loss(model, samples, 256, clip=0.2, micro_batch=1) < -1 / 7 - 1e-3


def test_the_ratio_is_clipped_on_the_side_the_advantage_gains_from():
    model = build_tiny()
    [good, bad] = _toy_samples(model)
    stale_good = Sample(good.prompt_ids, good.response_ids, 1.0, tuple(x - 1 for x in good.old_logprobs), True, False)
    stale_bad = Sample(bad.prompt_ids, bad.response_ids, -1.0, tuple(x - 1 for x in bad.old_logprobs), True, False)
    # ratio e: with A = 1 the loss per token is -min(e, 1.2) = -1.2; with A = -1 it is -min(-e, -1.2) = e
    assert batch_loss(model, [stale_good], 256, 0.2, 4) == pytest.approx(-1.2, abs=1e-5)
    assert batch_loss(model, [stale_bad], 256, 0.2, 4) == pytest.approx(math.e, abs=1e-5)


def _steps(trainer: GRPOTrainer, root: Path, policy, steps: range, experiment: str = "g"):
    workspace = TrainingWorkspace(artifacts=root, experiment=experiment)
    for step in steps:
        batch = store_step(root, experiment, step, STEP_REWARDS[step])
        policy = trainer.update(policy, batch, LR, workspace)
    return policy


def test_a_restored_trainer_writes_the_bytes_of_a_warm_one(tmp_path):
    initial = GRPOTrainer().initial(grpo_config())
    assert initial.lm is not None and initial.lm.checkpoint is None and initial.version == 0
    warm = _steps(GRPOTrainer(), tmp_path / "a", initial, range(3))
    first = _steps(GRPOTrainer(), tmp_path / "b", initial, range(2))
    resumed = _steps(GRPOTrainer(), tmp_path / "b", first, range(2, 3))  # a new actor: from the checkpoint
    assert warm == resumed and warm.version == 3
    assert warm.lm.stats.objective == "reinforce" and warm.lm.stats.token_source == "retokenized"
    assert warm.lm.stats.samples == 10 and warm.lm.stats.groups == 2 and warm.lm.parameters == 116032
    a = checkpoint.read_files(tmp_path / "a" / "models", warm.lm.checkpoint)
    b = checkpoint.read_files(tmp_path / "b" / "models", resumed.lm.checkpoint)
    assert a == b
    state = checkpoint.read(tmp_path / "a" / "models", warm.lm.checkpoint).state
    assert state["step"] == 3 and state["parent_hash"] == first.content_hash and state["lr"] == LR


def test_a_checkpoint_round_trips_byte_for_byte(tmp_path):
    policy = _steps(GRPOTrainer(), tmp_path, GRPOTrainer().initial(grpo_config()), range(1))
    files = checkpoint.read_files(tmp_path / "models", policy.lm.checkpoint)
    saved = checkpoint.read(tmp_path / "models", policy.lm.checkpoint)
    live = GRPOTrainer()._restore(policy, TrainingWorkspace(tmp_path, "g"), LR)
    torch.set_rng_state(live.rng)
    state = {k: v for k, v in saved.state.items() if k != "optimizer_groups"}
    assert checkpoint.encode(live.model, live.optimizer, state) == files
    assert int(saved.optimizer["state.0.step"]) == 1  # one optimiser step
    (tmp_path / "models" / policy.lm.checkpoint / checkpoint.MODEL_FILE).write_bytes(b"damaged")
    with pytest.raises(checkpoint.CheckpointError, match="does not match its digest"):
        checkpoint.read(tmp_path / "models", policy.lm.checkpoint)


def test_kl_to_the_base_is_zero_at_the_base_and_grows(tmp_path):
    policy = GRPOTrainer().initial(grpo_config(kl_coef=0.5))
    trainer = GRPOTrainer()
    one = _steps(trainer, tmp_path, policy, range(1))
    two = _steps(trainer, tmp_path, one, range(1, 2))
    assert one.lm.stats.kl == 0.0 and two.lm.stats.kl > 0


def test_a_saved_tiny_directory_loads_as_a_model_path(tmp_path):
    save_tiny(tmp_path / "tiny")
    model, tokenizer = load_base(str(tmp_path / "tiny"))
    assert isinstance(tokenizer, ByteChatTokenizer)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), build_tiny().parameters(), strict=True))
    config = grpo_config().with_changes(model=str(tmp_path / "tiny"))
    policy = _steps(GRPOTrainer(), tmp_path, GRPOTrainer().initial(config), range(1))
    assert policy.lm.base == str(tmp_path / "tiny") and len(policy.lm.base_hash) == 16
