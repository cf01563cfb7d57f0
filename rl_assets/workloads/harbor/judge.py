"""The LLM judge: one chat completion that scores a trial's transcript under a judge rubric.

It is a plain call (no caching, no retries beyond the client's, no bookkeeping): the verdict ledger
around it pays for it at most once per (trajectory, rubric, ``judge_id``).

The answer must be one JSON object with a numeric ``score`` in [0, 1] and optionally a string
``reason``. The object may be wrapped in a single Markdown code fence (```` ```json ... ``` ````),
because models fence JSON even when told not to and the fence changes nothing of its meaning; any
other text around it, a missing or non-numeric score, or one outside [0, 1] is a
:class:`JudgeAnswerError`. An answer is never repaired or clamped: a judge that answers outside its
scale is a judge failure, recorded as one, not a score.
"""

from __future__ import annotations

import json
import math
import re

from pydantic import BaseModel, ConfigDict

from rl_assets.domain.hashing import content_hash
from rl_assets.domain.judge_rubric import DEFAULT_JUDGE_RUBRIC, JudgeRubric
from rl_assets.domain.transcripts import Message, Transcript, Usage
from rl_assets.workloads.harbor.client import ChatClient
from rl_assets.workloads.harbor.tools import cap

REASON_CHARS = 500
_FENCED = re.compile(r"^```(?:json)?[ \t]*\n(?P<body>.*)\n```$", re.DOTALL | re.IGNORECASE)


class JudgeAnswerError(ValueError):
    """The judge answered, but not with a usable score (the call was made, and billed)."""

    def __init__(self, message: str, usage: Usage) -> None:
        super().__init__(message)
        self.usage = usage


class JudgeScore(BaseModel):
    """A judge's score of one trial, and what the call cost in tokens."""

    model_config = ConfigDict(frozen=True)

    score: float
    reason: str | None
    usage: Usage


def summarize(transcript: Transcript, limit: int) -> str:
    """The transcript as the judge reads it: each message on its own lines, the whole capped."""
    lines = []
    for m in transcript.messages:
        if m.role == "system":
            continue
        if m.content:
            lines.append(f"[{m.role}] {m.content}")
        lines.extend(f"[{m.role} calls {c.name}] {c.arguments}" for c in m.tool_calls)
    lines.append(f"[end] {transcript.ended} after {transcript.policy_calls} model calls")
    return cap("\n".join(lines), limit)


def parse_score(text: str | None, usage: Usage) -> tuple[float, str | None]:
    """``(score, reason)`` from a judge's answer, or :class:`JudgeAnswerError` saying what is wrong."""
    body = (text or "").strip()
    fenced = _FENCED.match(body)
    if fenced:
        body = fenced.group("body").strip()
    try:
        answer = json.loads(body)
    except json.JSONDecodeError:
        raise JudgeAnswerError(f"the judge's answer is not a JSON object: {cap(body, 200)!r}", usage) from None
    if not isinstance(answer, dict):
        raise JudgeAnswerError("the judge's answer is JSON but not an object", usage)
    score = answer.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise JudgeAnswerError(f"the judge's score is not a number: {score!r}", usage)
    if not 0 <= score <= 1:
        raise JudgeAnswerError(f"the judge's score {score} is outside [0, 1]", usage)
    reason = answer.get("reason")
    return float(score), cap(reason, REASON_CHARS) if isinstance(reason, str) else None


class LLMJudge:
    """Scores trials with one model under one rubric."""

    def __init__(self, client: ChatClient, rubric: JudgeRubric = DEFAULT_JUDGE_RUBRIC) -> None:
        self.client = client
        self.rubric = rubric

    @property
    def judge_id(self) -> str:
        """The model's name and the rubric's content, hashed: verdicts are reused exactly when both match.

        The server's URL is left out on purpose: the same model served elsewhere judges alike.
        """
        return "llm-" + content_hash({"model": self.client.endpoint.model, "rubric": self.rubric.model_dump()})

    def score(
        self, instruction: str, transcript: Transcript, reward: float | None, verifier_output: str = ""
    ) -> JudgeScore:
        """One paid call; raises :class:`JudgeAnswerError` or a ``ModelCallError`` on failure."""
        rubric = self.rubric
        prompt = rubric.render(
            instruction=instruction,
            transcript=summarize(transcript, rubric.transcript_chars),
            reward="none" if reward is None else f"{reward:g}",
            verifier_output=cap(verifier_output, rubric.verifier_output_chars) or "(none)",
        )
        answer = self.client.complete([Message(role="user", content=prompt)])
        usage = answer.turn.usage
        score, reason = parse_score(answer.message.content, usage)
        return JudgeScore(score=score, reason=reason, usage=usage)
