"""The chat transcript of one tool-using trial: what was said, and what a trainer needs of each model call.

A trainer on agentic rollouts trains step-wise: each model call is one sample whose prompt is what the
server tokenised (``prompt_token_ids``) and whose response is what it sampled (``token_ids``, with the
sampling ``logprobs``). Training on the server's own ids, not on re-tokenised chat text, is what keeps
the samples faithful (re-tokenising drifts), and tool output never needs a loss mask of its own: it is
only ever part of a later call's prompt. Servers that do not return ids (hosted APIs) leave them ``None``;
the messages and usage are still recorded, for the judge and for the bill.

Like every durable record these are frozen and serialised as canonical JSON, so a transcript's
``content_hash`` is its identity and a re-run that got the same answers records the same transcript.
Nothing here depends on the clock: elapsed times are left out on purpose.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rl_assets.domain.record import Record

Role = Literal["system", "user", "assistant", "tool"]
EndReason = Literal["no_tool_call", "max_turns", "timeout"]
"""Why the loop stopped: the model answered without a tool call (it says it is done), it used its
``max_turns`` model calls, or the agent's deadline passed."""


class Usage(Record):
    """Tokens billed for one model call, or summed over several (as the server counted them)."""

    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class ToolCall(Record):
    """One tool call the model asked for; ``arguments`` is the JSON text verbatim, malformed or not."""

    id: str
    name: str
    arguments: str


class Message(Record):
    """One chat message, in the shape it is sent back to the server on the next call."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    """The assistant's tool calls (assistant messages only)."""
    tool_call_id: str | None = None
    """The call a tool message answers (tool messages only); its content is capped by the agent."""


class ModelTurn(Record):
    """What one answered model call returned besides its message: the trainer's sample and the bill."""

    message_index: int = Field(ge=0)
    """Where the call's assistant message is in the transcript's ``messages``; every message before it
    was the call's prompt."""
    finish_reason: str
    usage: Usage
    prompt_token_ids: tuple[int, ...] | None = None
    token_ids: tuple[int, ...] | None = None
    """The completion's token ids, when the server returned them (vLLM's ``return_token_ids``)."""
    logprobs: tuple[float, ...] | None = None
    """The sampling logprob of each completion token, when the server returned them."""
    policy_version: int | None = Field(None, exclude_if=lambda v: v is None)
    """The policy version that answered, when the server says (the home's own policy server does); a
    trainer checks it against the version the trial asked for."""


class Transcript(Record):
    """One trial of a chat agent: the conversation, each model call, and how and why it ended."""

    model: str
    messages: tuple[Message, ...]
    turns: tuple[ModelTurn, ...]
    ended: EndReason
    usage: Usage
    """Summed over ``turns``."""
    protocol: Literal["text", "auto"] | None = Field(None, exclude_if=lambda v: v is None)
    """How the agent asked for actions, when not by tool calls alone: ``text`` (one fenced shell block per answer,
    its output the next user message) or ``auto`` (tool calls, or a fenced block from a model that answers so)."""

    @property
    def policy_calls(self) -> int:
        """Model calls answered (a retried call counts once: only its answer is recorded)."""
        return len(self.turns)

    @property
    def has_token_ids(self) -> bool:
        """Whether every call came back with prompt and completion ids, so a trainer can use it as is."""
        return bool(self.turns) and all(t.prompt_token_ids is not None and t.token_ids is not None for t in self.turns)
