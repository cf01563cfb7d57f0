"""A trial as a person reads it in the Dagster UI: its transcript as Markdown, every field capped.

People debug agents by reading what they did, so each trajectory's materialization carries this.
Caps keep the event log small whatever the agent printed: each message or tool output at
``MESSAGE_CHARS`` (head and tail kept), the whole at ``TOTAL_CHARS``. Nothing here can hold a
secret: API keys travel in request headers and are never part of a message, and the sandbox's
environment is not recorded.
"""

from __future__ import annotations

from rl_assets.domain.models import Trajectory
from rl_assets.domain.transcripts import Message, Transcript

MESSAGE_CHARS = 2000
"""One message, tool call or tool output, at most."""
TOTAL_CHARS = 30_000
"""The whole transcript, at most (a long trial shows its beginning and its end)."""


def capped(text: str, limit: int) -> str:
    """``text`` if it fits, else its head and tail around a note of how much was cut."""
    if len(text) <= limit:
        return text
    half = (limit - 40) // 2
    return f"{text[:half]}\n… [{len(text) - 2 * half} characters cut] …\n{text[-half:]}"


def _fenced(text: str) -> str:
    body = capped(text, MESSAGE_CHARS).replace("```", "ʼʼʼ")  # a fence inside cannot close ours
    return f"```\n{body}\n```"


def _message(m: Message) -> list[str]:
    lines = [f"**{m.role}**" + (f" (answer to `{m.tool_call_id}`)" if m.tool_call_id else "")]
    if m.content:
        lines.append(_fenced(m.content))
    for call in m.tool_calls:
        lines += [f"calls `{call.name}` (`{call.id}`):", _fenced(call.arguments)]
    return lines


def _chat(transcript: Transcript) -> list[str]:
    lines = [
        f"model `{transcript.model}`: {transcript.policy_calls} calls, ended by `{transcript.ended}`, "
        f"{transcript.usage.prompt_tokens} prompt + {transcript.usage.completion_tokens} completion tokens"
        + ("" if transcript.protocol is None else f", acting by the `{transcript.protocol}` protocol"),
        "",
    ]
    for m in transcript.messages:
        if m.role != "system":
            lines += [*_message(m), ""]
    return lines


def transcript_markdown(trajectory: Trajectory) -> str:
    """The trajectory as Markdown: a chat agent's conversation and its verifier, or the reference agent's reads."""
    if trajectory.transcript is not None:
        lines = _chat(trajectory.transcript)
    else:
        # One list item per read: Markdown joins consecutive plain lines into one paragraph.
        lines = [
            f"{i}. read `docs/doc_{t.doc}.txt`" + (": found the secret" if t.found else "")
            for i, t in enumerate(trajectory.turns, start=1)
        ]
        lines += ["", f"- answer: `{capped(trajectory.answer, 200)}`", f"- files written: {trajectory.files_written}"]
    if trajectory.verifier is not None:
        lines += [f"**verifier**: reward {trajectory.verifier.reward:g}", _fenced(trajectory.verifier.output or "")]
    return capped("\n".join(lines), TOTAL_CHARS)
