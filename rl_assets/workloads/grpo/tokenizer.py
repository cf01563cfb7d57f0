"""Chat tokenizers: how a recorded conversation becomes a prompt's and a response's token ids.

A trainer on agentic rollouts trains each model call as one sample: the prompt is every message before the
call's assistant message (so tool output, only ever part of a later prompt, is never trained on), the
response is that assistant message. ``ByteChatTokenizer`` is the tiny model's (bytes 0-255 and a few
special tokens, nothing to download); ``HFChatTokenizer`` wraps a checkpoint directory's own tokenizer and
chat template.

**Tools with any template.** Many small models' templates render ``content`` only (SmolLM2-Instruct's): tool
calls vanish from the prompt and from the response a trainer would train on, and the tool definitions are never
shown. ``HFChatTokenizer`` probes its template once; where it does not render an assistant's tool calls, each
call is written into the message's text as a Hermes block (``<tool_call>{"name": ..., "arguments": {...}}
</tool_call>``, the format :func:`~rl_assets.workloads.grpo.generation.parse_answer` reads back), and where it
does not render ``tools``, their JSON schemas go into the system message (:data:`TOOLS_FALLBACK`). A template
that renders them natively is used as it is. The home's policy server and the trainer use the same rendering,
so a model is trained on the prompts it was served.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from rl_assets.domain.transcripts import Message, ToolCall

BYTE_TOKENIZER_FILE = "rl_assets_tokenizer.json"
"""Written beside a saved tiny model: its tokenizer is the byte-level one, not a transformers tokenizer."""


class ChatTokenizer(Protocol):
    """Token ids of a prompt (the messages before a model call) and of the call's response."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def pad_id(self) -> int: ...

    @property
    def name(self) -> str:
        """The tokenizer's model, as errors name it."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens included: what a template check reads."""
        ...

    def prompt_ids(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> list[int]:
        """The prompt the model saw before answering: the messages (and the ``tools`` offered, OpenAI's
        definitions), then the start of an assistant turn."""
        ...

    def response_ids(
        self, messages: Sequence[Message], answer: Message, tools: Sequence[dict[str, Any]] = ()
    ) -> list[int]:
        """The ids the model produced for ``answer`` after ``messages`` (its end-of-turn token included)."""
        ...


SPECIALS = ("<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|call|>")


class ByteChatTokenizer:
    """Bytes 0-255 are themselves; special tokens follow. A message is its role token, its UTF-8 bytes, a
    ``<|call|>`` with ``name arguments`` per tool call, and ``<|eos|>``."""

    def __init__(self) -> None:
        self._special = {name: 256 + i for i, name in enumerate(SPECIALS)}

    @property
    def vocab_size(self) -> int:
        return 256 + len(SPECIALS)

    @property
    def pad_id(self) -> int:
        return self._special["<|pad|>"]

    @property
    def name(self) -> str:
        return "the tiny model's byte tokenizer"

    def decode(self, ids: Sequence[int]) -> str:
        names = {i: name for name, i in self._special.items()}
        out, raw = [], bytearray()
        for i in ids:
            if i < 256:
                raw.append(i)
                continue
            out.append(raw.decode("utf-8", errors="replace") + names[i])
            raw = bytearray()
        return "".join(out) + raw.decode("utf-8", errors="replace")

    def _body(self, message: Message) -> list[int]:
        ids = list((message.content or "").encode("utf-8"))
        for call in message.tool_calls:
            ids += [self._special["<|call|>"], *f"{call.name} {call.arguments}".encode()]
        return [*ids, self._special["<|eos|>"]]

    def prompt_ids(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> list[int]:
        """The tiny model is never shown the tools: it learns the one it is trained to call."""
        ids = [self._special["<|bos|>"]]
        for m in messages:
            ids += [self._special[f"<|{m.role}|>"], *self._body(m)]
        return [*ids, self._special["<|assistant|>"]]

    def response_ids(
        self, messages: Sequence[Message], answer: Message, tools: Sequence[dict[str, Any]] = ()
    ) -> list[int]:
        return self._body(answer)

    def save(self, directory: Path) -> None:
        """Mark ``directory`` (a saved model) as using this tokenizer."""
        (directory / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes", "specials": list(SPECIALS)}))


TOOLS_FALLBACK = (
    "You can call tools. Their JSON schemas:\n<tools>\n{tools}\n</tools>\n"
    'To call one, answer with <tool_call>{{"name": <the tool\'s name>, "arguments": <an object>}}</tool_call>.'
)
"""The system message's addition that shows ``tools`` to a template that does not render them."""
_PROBE = "rl_assets_probe_tool"
_PROBE_VALUE = "rl_assets_probe_value"


def hermes_block(call: ToolCall) -> str:
    """A tool call as a Hermes block: its arguments as parsed JSON where they parse, else as their text."""
    try:
        arguments: Any = json.loads(call.arguments)
    except ValueError:
        arguments = call.arguments
    return f"<tool_call>{json.dumps({'name': call.name, 'arguments': arguments})}</tool_call>"


def _chat(messages: Sequence[Message], fold_calls: bool = False) -> list[dict[str, Any]]:
    """Messages in the shape chat templates take (tool calls with their arguments as sent); with ``fold_calls``,
    an assistant's tool calls are written into its text as Hermes blocks instead."""
    out: list[dict[str, Any]] = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.tool_calls and fold_calls:
            d["content"] = "\n".join([*([m.content] if m.content else []), *map(hermes_block, m.tool_calls)])
        elif m.tool_calls:
            d["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


class HFChatTokenizer:
    """A checkpoint directory's tokenizer and chat template; the response is the full conversation's ids past
    the prompt's (the usual way to cut a templated conversation into prompt and completion)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._native: tuple[bool, bool] | None = None
        """Whether the template renders an assistant's tool calls, and the ``tools`` definitions (probed once)."""

    def _renders(self) -> tuple[bool, bool]:
        if self._native is None:
            arguments = json.dumps({"value": _PROBE_VALUE})
            call = Message(role="assistant", tool_calls=(ToolCall(id="probe", name=_PROBE, arguments=arguments),))
            ask = Message(role="user", content="probe")
            tool = {"type": "function", "function": {"name": _PROBE, "description": "", "parameters": {}}}
            with_call = self._text(_chat([ask, call]), None)
            self._native = (
                _PROBE in with_call and _PROBE_VALUE in with_call,
                _PROBE in self._text(_chat([ask]), [tool]),
            )
        return self._native

    def _text(self, chat: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """The template's text of ``chat``; empty where the template refuses the shape (a probe's answer: no)."""
        from jinja2 import TemplateError

        try:
            return str(self.tokenizer.apply_chat_template(chat, tools=tools, tokenize=False))
        except (TemplateError, ValueError, TypeError):
            return ""

    def render(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """The messages and tools to hand the template: natively where it renders them, else folded in."""
        calls_native, tools_native = self._renders()
        chat = _chat(messages, fold_calls=not calls_native)
        if not tools or tools_native:
            return chat, list(tools) or None
        listed = TOOLS_FALLBACK.format(tools="\n".join(json.dumps(t) for t in tools))
        if chat and chat[0]["role"] == "system":
            chat[0] = {**chat[0], "content": f"{chat[0]['content']}\n\n{listed}"}
        else:
            chat.insert(0, {"role": "system", "content": listed})
        return chat, None

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self.tokenizer.eos_token_id

    @property
    def name(self) -> str:
        return str(self.tokenizer.name_or_path)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def _ids(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], generation_prompt: bool) -> list[int]:
        chat, native_tools = self.render(messages, tools)
        ids = self.tokenizer.apply_chat_template(
            chat, tools=native_tools, tokenize=True, add_generation_prompt=generation_prompt, return_dict=False
        )
        return list(ids)

    def prompt_ids(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> list[int]:
        return self._ids(messages, tools, generation_prompt=True)

    def response_ids(
        self, messages: Sequence[Message], answer: Message, tools: Sequence[dict[str, Any]] = ()
    ) -> list[int]:
        prompt = self.prompt_ids(messages, tools)
        full = self._ids([*messages, answer], tools, generation_prompt=False)
        if full[: len(prompt)] != prompt:
            raise ValueError("the chat template does not extend the prompt with the answer; cannot cut a response")
        return full[len(prompt) :]


def load_tokenizer(directory: Path) -> ChatTokenizer:
    """The tokenizer of a checkpoint directory: the byte-level one if marked so, else the directory's own."""
    if (directory / BYTE_TOKENIZER_FILE).exists():
        return ByteChatTokenizer()
    from transformers import AutoTokenizer

    return HFChatTokenizer(AutoTokenizer.from_pretrained(directory, local_files_only=True))
