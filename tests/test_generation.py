"""The policy server's sampling and answer parsing, on the tiny model (no home, no server)."""

from __future__ import annotations

from rl_assets.domain.transcripts import Message
from rl_assets.workloads.grpo.generation import parse_answer, sample
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
