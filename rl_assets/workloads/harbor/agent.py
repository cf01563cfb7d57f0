"""The chat agent's loop: the model acts in the trial's sandbox until it is done, out of turns or out of time.

The loop runs in the trusted worker; only the commands run in the sandbox (through a
:class:`~rl_assets.sandbox.protocol.Shell`). Given the server's answers it is deterministic: the
messages it sends hold nothing but the instruction, the answers and the commands' outputs (no clock, no
randomness), so a retried trial whose calls are answered alike records the same transcript.

How the model acts is the agent's protocol:

- ``tools``: it calls the tools (``bash``, ``read_file``, ``write_file``); an answer without a call ends it;
- ``text``: for models without tool calling (the scaffold of mini-swe-agent): it answers with one fenced shell
  block, which is run, its exit code and output the next user message; an answer without a block ends it,
  and one with several is told so and runs nothing;
- ``auto``: the tools are offered, and an answer without a call but with a fenced block is run as ``text``
  would run it, so a model that ignores the tools still acts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Literal

from rl_assets.domain.hashing import content_hash
from rl_assets.domain.transcripts import EndReason, Message, ModelTurn, Transcript, Usage
from rl_assets.sandbox.protocol import Shell
from rl_assets.workloads.harbor.client import ChatClient, ModelCallError
from rl_assets.workloads.harbor.tools import TOOLS, cap, run_command, run_tool

SYSTEM_PROMPT = (
    "You are an agent working in a Linux shell, in the working directory of a task. "
    "Use the tools to do the task the user gives you. "
    "When the task is done, answer with a short summary and no tool call."
)
TEXT_PROMPT = (
    "You are an agent working in a Linux shell, in the working directory of a task. "
    "To run a command, answer with exactly one fenced code block holding it, like this:\n"
    "```bash\nls -la\n```\n"
    "You will be told its exit code and output. "
    "When the task is done, answer with a short summary and no code block."
)
AUTO_PROMPT = f"{SYSTEM_PROMPT} If you cannot call the tools, answer with one fenced ```bash block to run instead."
NOT_RUN = "error: not run, the agent's time ran out"
SEED_RANGE = 2**31
AgentProtocol = Literal["tools", "text", "auto"]
_COMMAND_BLOCK = re.compile(r"```(?:bash|sh|shell|console)?[ \t]*\n(?P<command>.*?)```", re.DOTALL)


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
    protocol: AgentProtocol = "tools"
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)

    @property
    def version(self) -> str:
        """A hash of everything that decides how the agent acts, so trajectories are re-made when it changes."""
        acts = {"system": SYSTEM_PROMPT, "tools": list(TOOLS)}
        if self.protocol != "tools":  # (the tools' hash is the one it always was)
            acts = {"protocol": self.protocol, "system": self._system_prompt, "tools": list(self._tools)}
        return "chat-agent-" + content_hash({**acts, "limits": asdict(self.limits)})

    @property
    def _system_prompt(self) -> str:
        return {"tools": SYSTEM_PROMPT, "text": TEXT_PROMPT, "auto": AUTO_PROMPT}[self.protocol]

    @property
    def _tools(self) -> tuple[dict, ...]:
        return () if self.protocol == "text" else TOOLS

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
        opening = [Message(role="system", content=self._system_prompt)] if before is None else list(before.messages)
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
                answer = client.complete(messages, self._tools, timeout_s=left, seed=turn_seed)
            except ModelCallError as err:
                if err.timed_out and left < client.endpoint.timeout_s:  # cut short by the deadline, not the server
                    ended = "timeout"
                    break
                raise
            turns.append(answer.turn.model_copy(update={"message_index": len(messages)}))
            messages.append(answer.message)
            if answer.message.tool_calls and self._tools:
                for call in answer.message.tool_calls:
                    left = min(limits.command_timeout_s, deadline - self.clock())
                    text = NOT_RUN if left <= 0 else cap(run_tool(call, shell, left), limits.tool_output_chars)
                    messages.append(Message(role="tool", content=text, tool_call_id=call.id))
            else:
                blocks = [] if self.protocol == "tools" else command_blocks(answer.message.content)
                if not blocks:
                    ended = "no_tool_call"
                    break
                messages.append(Message(role="user", content=self._run_text(blocks, shell, deadline)))
            if self.clock() >= deadline:
                ended = "timeout"
                break
        return Transcript(
            model=client.endpoint.model,
            messages=tuple(messages),
            turns=tuple(turns),
            ended=ended,
            usage=sum((t.usage for t in turns), Usage()),
            protocol=None if self.protocol == "tools" else self.protocol,
        )

    def _run_text(self, blocks: list[str], shell: Shell, deadline: float) -> str:
        """The user message after an answer holding ``blocks``: its one command's result, or why none ran."""
        if len(blocks) > 1:
            return f"error: your answer holds {len(blocks)} code blocks; answer with exactly one command block"
        left = min(self.limits.command_timeout_s, deadline - self.clock())
        return NOT_RUN if left <= 0 else cap(run_command(blocks[0], shell, left), self.limits.tool_output_chars)


def command_blocks(content: str | None) -> list[str]:
    """The commands of the fenced shell blocks (``bash``, ``sh``, ``shell``, ``console`` or unlabelled) of an answer."""
    return [m.group("command").strip() for m in _COMMAND_BLOCK.finditer(content or "") if m.group("command").strip()]


def final_answer(transcript: Transcript) -> str:
    """The agent's last word: its last assistant message's text (what ``/logs/agent/answer.txt`` holds)."""
    for message in reversed(transcript.messages):
        if message.role == "assistant":
            return message.content or ""
    return ""
