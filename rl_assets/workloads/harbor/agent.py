"""The chat agent's loop: the model calls tools in the trial's sandbox until it is done, out of turns or out of time.

The loop runs in the trusted worker; only the tools' commands run in the sandbox (through a
:class:`~rl_assets.sandbox.protocol.Shell`). Given the server's answers it is deterministic: the
messages it sends hold nothing but the instruction, the answers and the tools' outputs (no clock, no
randomness), so a retried trial whose calls are answered alike records the same transcript.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from rl_assets.domain.hashing import content_hash
from rl_assets.domain.transcripts import EndReason, Message, ModelTurn, Transcript, Usage
from rl_assets.sandbox.protocol import Shell
from rl_assets.workloads.harbor.client import ChatClient, ModelCallError
from rl_assets.workloads.harbor.tools import TOOLS, cap, run_tool

SYSTEM_PROMPT = (
    "You are an agent working in a Linux shell, in the working directory of a task. "
    "Use the tools to do the task the user gives you. "
    "When the task is done, answer with a short summary and no tool call."
)
NOT_RUN = "error: not run, the agent's time ran out"
SEED_RANGE = 2**31


@dataclass(frozen=True)
class AgentLimits:
    """How long a trial may go on; part of the agent's identity (other limits, other trajectories)."""

    max_turns: int = 30
    """Model calls at most."""
    timeout_s: float = 600.0
    """The whole loop's deadline (Harbor's ``[agent] timeout_sec``)."""
    command_timeout_s: float = 120.0
    """One tool command at most (and never past the deadline)."""
    tool_output_chars: int = 8000
    """A tool message's cap: what the model sees, and what the transcript records."""


@dataclass(frozen=True)
class ChatAgent:
    """A tool-using chat agent: a system prompt, three sandboxed tools, and its limits."""

    limits: AgentLimits = field(default_factory=AgentLimits)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)

    @property
    def version(self) -> str:
        """A hash of everything that decides how the agent acts, so trajectories are re-made when it changes."""
        return "chat-agent-" + content_hash(
            {"system": SYSTEM_PROMPT, "tools": list(TOOLS), "limits": asdict(self.limits)}
        )

    def run(
        self,
        instruction: str,
        client: ChatClient,
        shell: Shell,
        seed: int | None = None,
        before: Transcript | None = None,
    ) -> Transcript:
        """One trial: ``instruction`` (the task's ``instruction.md``, verbatim) worked on through ``shell``.

        ``seed``: ask the server for reproducible sampling, call *k* with ``seed + k`` (the trial's own
        seed, so each sample of a task explores differently and a retried attempt asks alike).

        ``before``: the dialogue so far (a multi-step task's earlier steps): the instruction is its next user
        message, and ``max_turns`` and the deadline count this instruction's turns alone.

        Raises :class:`~rl_assets.workloads.harbor.client.ModelCallError` when a model call fails for
        good (the trial is then a failed trial); a call cut short by the deadline ends the loop instead.
        """
        limits = self.limits
        deadline = self.clock() + limits.timeout_s
        opening = [Message(role="system", content=SYSTEM_PROMPT)] if before is None else list(before.messages)
        messages = [*opening, Message(role="user", content=instruction)]
        turns: list[ModelTurn] = [] if before is None else list(before.turns)
        earlier = len(turns)
        ended: EndReason = "max_turns"
        while len(turns) - earlier < limits.max_turns:
            left = deadline - self.clock()
            if left <= 0:
                ended = "timeout"
                break
            try:
                turn_seed = None if seed is None else (seed + len(turns)) % SEED_RANGE
                answer = client.complete(messages, TOOLS, timeout_s=left, seed=turn_seed)
            except ModelCallError as err:
                if err.timed_out and left < client.endpoint.timeout_s:  # cut short by the deadline, not the server
                    ended = "timeout"
                    break
                raise
            turns.append(answer.turn.model_copy(update={"message_index": len(messages)}))
            messages.append(answer.message)
            if not answer.message.tool_calls:
                ended = "no_tool_call"
                break
            for call in answer.message.tool_calls:
                left = min(limits.command_timeout_s, deadline - self.clock())
                text = NOT_RUN if left <= 0 else cap(run_tool(call, shell, left), limits.tool_output_chars)
                messages.append(Message(role="tool", content=text, tool_call_id=call.id))
            if self.clock() >= deadline:
                ended = "timeout"
                break
        return Transcript(
            model=client.endpoint.model,
            messages=tuple(messages),
            turns=tuple(turns),
            ended=ended,
            usage=sum((t.usage for t in turns), Usage()),
        )


def final_answer(transcript: Transcript) -> str:
    """The agent's last word: its last assistant message's text (what ``/logs/agent/answer.txt`` holds)."""
    for message in reversed(transcript.messages):
        if message.role == "assistant":
            return message.content or ""
    return ""
