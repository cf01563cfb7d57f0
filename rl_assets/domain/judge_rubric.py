"""A judge rubric: what an LLM judge is asked about a trial, as a TOML file a person edits.

The prompt is a :class:`string.Template` (``$instruction``, ``${transcript}``; ``$$`` for a dollar
sign) rather than a ``str.format`` template, because a judge prompt shows the model the JSON it must
answer with, and JSON's braces would otherwise need doubling. Placeholders are checked when the
rubric is loaded, so a typo fails before any paid call, not in the middle of a run::

    name = "solved"
    scale = "1 if the task is fully done, 0 if not"
    template = '''
    Task: $instruction
    ...
    Answer with {"score": <number>, "reason": "<one sentence>"}.
    '''
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from string import Template

from pydantic import Field, field_validator

from rl_assets.domain.names import RubricName
from rl_assets.domain.record import Record

PLACEHOLDERS = frozenset({"instruction", "transcript", "reward", "verifier_output", "scale"})
REQUIRED = frozenset({"instruction", "transcript"})


class JudgeRubric(Record):
    """The judge's prompt and scale; its content (with the model) is the judge's identity."""

    name: RubricName
    template: str = Field(min_length=1)
    """The user message: ``$instruction``, ``$transcript`` (a capped summary), ``$reward`` (the
    verifier's, or "none"), ``$verifier_output`` (capped) and ``$scale``."""
    scale: str = Field(min_length=1, description="What the numbers in [0, 1] mean.")
    transcript_chars: int = Field(default=12000, ge=200)
    verifier_output_chars: int = Field(default=2000, ge=100)

    @field_validator("template")
    @classmethod
    def _placeholders(cls, template: str) -> str:
        parsed = Template(template)
        if not parsed.is_valid():
            raise ValueError("the template has a '$' that starts no placeholder (write '$$' for a dollar sign)")
        names = set(parsed.get_identifiers())
        if unknown := names - PLACEHOLDERS:
            raise ValueError(f"unknown placeholders {sorted(unknown)}; the known ones are {sorted(PLACEHOLDERS)}")
        if missing := REQUIRED - names:
            raise ValueError(f"the template must use {sorted(missing)}")
        return template

    def render(self, **values: str) -> str:
        """The prompt with ``values`` filled in (every placeholder the template uses must be given)."""
        return Template(self.template).substitute(scale=self.scale, **values)


def load_judge_rubric(path: Path) -> JudgeRubric:
    """The rubric in TOML file ``path`` (a :class:`pydantic.ValidationError` names what is wrong)."""
    with path.open("rb") as f:
        return JudgeRubric.model_validate(tomllib.load(f))


DEFAULT_JUDGE_RUBRIC = JudgeRubric(
    name="task-done",
    scale=(
        "1.0: the task is fully and correctly done; 0.5: partly done or done with side effects the task "
        "did not ask for; 0.0: not done, or the agent gave up or claimed success without doing it"
    ),
    template="""You are grading an AI agent's work on a task in a Linux working directory.

## The task the agent was given
$instruction

## What the agent did (a summary of its transcript)
$transcript

## The automatic verifier
Reward: $reward
Output:
$verifier_output

## How to grade
Score from 0 to 1: $scale.
Answer with a single JSON object and nothing else: {"score": <a number from 0 to 1>, "reason": "<one sentence>"}
""",
)
"""What a judge asks when the experiment names no rubric file of its own."""
