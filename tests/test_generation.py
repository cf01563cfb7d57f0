"""The policy server's sampling and answer parsing, on the tiny model (no home, no server)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rl_assets.domain.transcripts import Message
from rl_assets.workloads.grpo.batched_sampling import WIDTH, Request, Sampler, sample, sample_together
from rl_assets.workloads.grpo.generation import parse_answer
from rl_assets.workloads.grpo.model import build_tiny
from rl_assets.workloads.grpo.tokenizer import SPECIALS, ByteChatTokenizer

EOS = 256 + SPECIALS.index("<|eos|>")
CALL = 256 + SPECIALS.index("<|call|>")


def _prompt() -> list[int]:
    return ByteChatTokenizer().prompt_ids([Message(role="user", content="Answer with lowercase letters.")])


def test_a_seed_samples_the_same_tokens_and_another_seed_others():
    model = build_tiny().eval()
    first = sample(model, _prompt(), {EOS}, 24, 1.0, seed=7)
    assert sample(model, _prompt(), {EOS}, 24, 1.0, seed=7) == first
    assert sample(model, _prompt(), {EOS}, 24, 1.0, seed=8).token_ids != first.token_ids
    assert len(first.logprobs) == len(first.token_ids) and all(lp <= 0 for lp in first.logprobs)
    assert first.finish_reason == ("stop" if first.token_ids[-1] == EOS else "length")


def test_the_logprobs_are_the_models_own_at_temperature_one():
    import torch

    model = build_tiny().eval()
    prompt = _prompt()
    got = sample(model, prompt, {EOS}, 8, 1.0, seed=3)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + list(got.token_ids)])).logits[0]
    full = torch.log_softmax(logits.float(), dim=-1)
    expected = [float(full[len(prompt) - 1 + i, t]) for i, t in enumerate(got.token_ids)]
    assert max(abs(a - b) for a, b in zip(expected, got.logprobs, strict=True)) < 1e-4


def test_a_well_formed_call_of_an_offered_tool_is_a_tool_call_and_anything_else_text():
    tokenizer = ByteChatTokenizer()
    ids = [*b"let me look", CALL, *b'bash {"command": "ls"}', CALL, *b"rm {}", CALL, *b"bash not-json", EOS]
    answer = parse_answer(tokenizer, ids, {"bash"})
    assert [(c.name, c.arguments) for c in answer.tool_calls] == [("bash", '{"command": "ls"}')]
    assert answer.content == "let me look rm {} bash not-json"
    assert parse_answer(tokenizer, [*"\u00e9t\u00e9".encode()[:4], EOS], set()).content == "\u00e9t\ufffd"


def test_a_request_decoded_among_others_gets_the_tokens_it_gets_alone():
    """Batching is invisible in the tokens: a retried trial samples the same answer whoever shares its batch."""
    model = build_tiny().eval()
    asked = [Request(tuple(_prompt()), 24, 1.0, seed) for seed in range(WIDTH + 2)]
    other = Request(tuple(ByteChatTokenizer().prompt_ids([Message(role="user", content="Say more.")])), 24, 0.7, 11)
    alone = [sample_together(model, {EOS}, [r])[0] for r in asked]
    assert sample_together(model, {EOS}, asked) == alone, "more requests than slots: each joins as one frees"
    assert sample_together(model, {EOS}, [other, *asked[:2]])[1:] == alone[:2], "beside a different prompt"
    assert len({g.token_ids for g in alone}) > 1, "the seeds differ, and so do the answers"


def test_the_sampler_thread_answers_concurrent_callers_as_if_each_were_alone():
    model = build_tiny().eval()
    asked = [Request(tuple(_prompt()), 16 + seed, 1.0, seed) for seed in range(6)]
    alone = [sample_together(model, {EOS}, [r])[0] for r in asked]
    sampler = Sampler(model, {EOS})
    try:
        with ThreadPoolExecutor(len(asked)) as pool:
            got = list(pool.map(lambda r: sampler.submit(r).result(timeout=120), asked))
    finally:
        sampler.close()
    assert got == alone
    with pytest.raises(RuntimeError, match="closed"):
        sampler.submit(asked[0])


def test_a_request_the_model_cannot_take_fails_alone_and_the_sampler_goes_on():
    model = build_tiny().eval()
    sampler = Sampler(model, {EOS})
    try:
        bad = sampler.submit(Request((10_000,), 4, 1.0, 0))  # an id beyond the vocabulary
        good = sampler.submit(Request(tuple(_prompt()), 8, 1.0, 3))
        with pytest.raises(IndexError):
            bad.result(timeout=120)
        assert good.result(timeout=120) == sample(model, _prompt(), {EOS}, 8, 1.0, seed=3)
    finally:
        sampler.close()
