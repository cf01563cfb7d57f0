"""A policy's answers: its weights loaded from a checkpoint, and its sampled tokens read back as a message.

This is what the home's policy server (:mod:`rl_assets.workloads.grpo.serving`) runs for every chat
completion, and what makes its rollouts trainable: the completion's token ids and the logprob of each
under the sampling distribution (:mod:`rl_assets.workloads.grpo.batched_sampling`) are exactly what the GRPO
update's importance ratios are taken against.

Sampling is seeded per request (the OpenAI ``seed`` field) on a generator of its own, on one thread with
deterministic kernels and batch-invariant steps, so a request asked again (a retried trial, a rerun after a
crash) gets the same tokens: a trial's trajectory does not depend on how many times it was attempted, nor on
which requests it shared the model with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_assets.domain.language_model import LanguageModelPolicy
from rl_assets.domain.transcripts import ToolCall
from rl_assets.workloads.grpo import checkpoint
from rl_assets.workloads.grpo.model import load_base
from rl_assets.workloads.grpo.tokenizer import SPECIALS, ByteChatTokenizer, ChatTokenizer


def copy_weights(model: Any, saved: checkpoint.Checkpoint, lm: LanguageModelPolicy) -> None:
    """Load ``saved``'s parameters into ``model`` (the base of ``lm``), refusing a checkpoint of another model."""
    import torch

    names = {name for name, _ in model.named_parameters()}
    if names != set(saved.parameters):
        raise checkpoint.CheckpointError(f"checkpoint {lm.checkpoint} does not hold the parameters of {lm.base}")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(saved.parameters[name])


def stop_ids(model: Any) -> frozenset[int]:
    """The tokens that end the model's turn: its config's ``eos_token_id`` (one id, or several)."""
    eos = model.config.eos_token_id
    return frozenset(eos if isinstance(eos, list) else [eos])


def load_policy(lm: LanguageModelPolicy, models: Path) -> tuple[Any, ChatTokenizer]:
    """The model ``lm`` is (its base with its checkpoint's weights), in eval mode, and its tokenizer."""
    model, tokenizer = load_base(lm.base)
    if lm.checkpoint is not None:
        copy_weights(model, checkpoint.read(models, lm.checkpoint), lm)
    model.eval()
    return model, tokenizer


@dataclass(frozen=True)
class Answer:
    """A completion as a chat message: its text and the tool calls it made."""

    content: str
    tool_calls: tuple[ToolCall, ...]


_CALL = 256 + SPECIALS.index("<|call|>")
_EOS = 256 + SPECIALS.index("<|eos|>")
_HERMES = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def _call(index: int, name: str, arguments: str, tools: set[str]) -> ToolCall | None:
    """A tool call if it names an offered tool with a JSON object of arguments; else None (plain text)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    if name not in tools or not isinstance(parsed, dict):
        return None
    return ToolCall(id=f"call_{index}", name=name, arguments=arguments)


def parse_answer(tokenizer: ChatTokenizer, token_ids: Sequence[int], tools: set[str]) -> Answer:
    """The message ``token_ids`` spell: for the byte tokenizer ``text <|call|>name {args}...``, for a
    checkpoint's own tokenizer Hermes ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks (the
    format vLLM's ``--tool-call-parser hermes`` reads). A malformed call stays text."""
    ids = [i for i in token_ids if i != _EOS] if isinstance(tokenizer, ByteChatTokenizer) else list(token_ids)
    if isinstance(tokenizer, ByteChatTokenizer):
        parts = _split(ids, _CALL)
        text = bytes(i for i in parts[0] if i < 256).decode("utf-8", errors="replace")
        calls: list[ToolCall] = []
        for k, part in enumerate(parts[1:]):
            name, _, arguments = bytes(i for i in part if i < 256).decode("utf-8", errors="replace").partition(" ")
            call = _call(k, name, arguments, tools)
            if call is None:
                text += f" {name} {arguments}"
            else:
                calls.append(call)
        return Answer(text, tuple(calls))
    text = tokenizer.tokenizer.decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]
    calls = []
    for k, block in enumerate(_HERMES.findall(text)):
        try:
            body = json.loads(block)
        except ValueError:
            continue
        if isinstance(body, dict):
            call = _call(k, str(body.get("name")), json.dumps(body.get("arguments")), tools)
            if call is not None:
                calls.append(call)
    return Answer(_HERMES.sub("", text).strip() if calls else text, tuple(calls))


def _split(ids: Sequence[int], separator: int) -> list[list[int]]:
    parts: list[list[int]] = [[]]
    for i in ids:
        if i == separator:
            parts.append([])
        else:
            parts[-1].append(i)
    return parts
