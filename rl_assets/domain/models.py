"""The typed records that cross process and storage boundaries.

Every model is a frozen pydantic model, serialised as canonical JSON, so a
record written by one process (a sandbox, a step worker, the Ray trainer) is
read back bit for bit by another, and its ``content_hash`` is its identity.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rl_assets.domain.language_model import LanguageModelPolicy
from rl_assets.domain.names import RubricName
from rl_assets.domain.record import Record
from rl_assets.domain.transcripts import Transcript, Usage

PROVENANCE_VERIFIER = "verifier"
"""A task trial's verifier reward the harness saw written by test.sh's own shell (or a Python it started that ran
none of the agent's code), the tests untouched. Any other provenance is ``flagged: <why>``, never trained on."""
MAX_RUBRIC_WEIGHT = 1000.0
"""Weights scale a score in [0, 1]; beyond this a weight is a typo, not a preference."""
N_DOCS = 8
"""Documents per world; the policy's prior has one weight per document."""


class Rubric(Record):
    """The judge's scoring weights. A rubric is an input to judging only.

    Every weight is a finite number in ``[0, MAX_RUBRIC_WEIGHT]``: a rubric
    file holding ``Infinity``, ``NaN`` or ``1e308`` is refused, not stored.
    """

    name: RubricName = Field(description="Rubric name; the file is home/rubrics/<name>.json.")
    correctness_weight: float = Field(
        ge=0, le=MAX_RUBRIC_WEIGHT, allow_inf_nan=False, description="Weight of a verified answer (0 to 1000)."
    )
    efficiency_weight: float = Field(
        ge=0, le=MAX_RUBRIC_WEIGHT, allow_inf_nan=False, description="Weight of finding it in few turns (0 to 1000)."
    )
    tidiness_weight: float = Field(
        ge=0, le=MAX_RUBRIC_WEIGHT, allow_inf_nan=False, description="Weight of writing only answer.txt (0 to 1000)."
    )


class Policy(Record):
    """The policy a step starts from: the bandit's priors over the 8 documents of each world, or a language model.

    A language model's weights are files; ``lm`` names its checkpoint (and is left out of the bandit's JSON,
    so a reference policy dumps and hashes as before).
    """

    version: int = Field(ge=0)
    priors: dict[str, list[float]]
    lm: LanguageModelPolicy | None = Field(None, exclude_if=lambda v: v is None)

    @classmethod
    def initial(cls, world_ids: list[str]) -> Policy:
        """Version 0: eight 1.0s for every world."""
        return cls(version=0, priors={w: [1.0] * N_DOCS for w in world_ids})


class TrialSpec(Record):
    """What a trial is asked to do; with the world and policy, its identity."""

    trial_id: str
    step: int = Field(ge=0)
    prompt_index: int = Field(ge=0)
    sample_index: int = Field(ge=0)
    world_id: str
    prompt: str = "find the secret"
    max_turns: int = Field(ge=1)


class Turn(Record):
    """One tool call of the agent: it read ``doc`` and saw a secret or not."""

    doc: int = Field(ge=0, lt=N_DOCS)
    found: bool


class StepOutcome(Record):
    """One step of a multi-step task (Harbor's ``[[steps]]``): its verifier's rewards, or why it has none."""

    name: str
    rewards: dict[str, float] = Field(default_factory=dict, description="The step's reward file; empty if unverified.")
    error: str | None = Field(None, exclude_if=lambda v: v is None, description="Why the step ended unverified.")
    output: str = Field("", description="The step verifier's (or failed setup's) output, capped.")

    @property
    def verified(self) -> bool:
        return self.error is None

    def summary(self) -> str:
        """``reward 1`` (every key), or the error."""
        if self.error is not None:
            return self.error
        return ", ".join(f"{key} {value:g}" for key, value in sorted(self.rewards.items()))


class VerifierOutcome(Record):
    """What a task's verifier (``tests/test.sh``) reported, read by the trusted side after it exited."""

    reward: float = Field(allow_inf_nan=False, description="The training reward: the reward file's 'reward'.")
    rewards: dict[str, float] = Field(description="Every number of the reward file (reward.txt gives 'reward').")
    output: str = Field(description="The verifier's output, capped.")
    provenance: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="'verifier' (every byte of the reward written by test.sh's own shell, the tests untouched) or "
        "'flagged: <why>' (the platform cannot vouch for it: never trained on); None where it is not known.",
    )
    neutralised: tuple[str, ...] = Field(
        (),
        exclude_if=lambda v: not v,
        description="Links and special files of the agent's final filesystem removed before the verifier ran.",
    )
    steps: tuple[StepOutcome, ...] = Field(
        (),
        exclude_if=lambda v: not v,
        description="A multi-step task's steps, in order, up to the one that ended the trial; the rewards above "
        "are their per-key means (or the last one's, multi_step_reward_strategy = 'final').",
    )


class Trajectory(Record):
    """A finished rollout: what the agent did, and with which policy and world."""

    trial_id: str
    world_id: str
    world_hash: str
    policy_version: int
    policy_hash: str
    turns: list[Turn]
    answer: str
    files_written: list[str]
    transcript: Transcript | None = Field(None, exclude_if=lambda v: v is None)
    """A chat agent's trial: its conversation and model calls (the reference agent's turns are ``turns``)."""
    verifier: VerifierOutcome | None = Field(None, exclude_if=lambda v: v is None)
    """A task trial: what the task's verifier reported, run in the trial's fork after the agent."""

    @property
    def model_calls(self) -> int:
        """The agent's turns: its model calls (a chat agent) or its tool calls (the reference agent)."""
        return self.transcript.policy_calls if self.transcript is not None else len(self.turns)

    @property
    def found_doc(self) -> int | None:
        """The document of the first turn that found the secret, if any."""
        return next((t.doc for t in self.turns if t.found), None)


class Verdict(Record):
    """A judge's score of one trajectory under one rubric.

    The reference judge fills in its three criteria; an LLM judge gives a
    ``reason`` and the ``usage`` it was billed, and leaves the criteria out.
    """

    trajectory_hash: str
    rubric_name: str
    rubric_hash: str
    correct: float | None = Field(None, exclude_if=lambda v: v is None)
    efficiency: float | None = Field(None, exclude_if=lambda v: v is None)
    tidy: float | None = Field(None, exclude_if=lambda v: v is None)
    score: float
    reason: str | None = Field(None, exclude_if=lambda v: v is None)
    usage: Usage | None = Field(None, exclude_if=lambda v: v is None)


class MalformedVerdict(ValueError):
    """A judge answered (and was billed) but not with a usable verdict: prose, a score out of its scale.

    Distinct from a call that failed (no answer): the verdict ledger records it as ``malformed`` and
    retries it only as often as the experiment's ``judge_malformed_retries`` allows, since asking a
    model the same question again tends to get the same kind of answer, at the same price.
    """

    def __init__(self, message: str, usage: Usage) -> None:
        super().__init__(message)
        self.usage = usage


class Reward(Record):
    """The training signal of one trial: verifier plus judge."""

    trial_id: str
    world_id: str
    rubric_name: str
    verified: bool
    score: float
    reward: float
    found_doc: int | None
    turns: int
    trajectory_hash: str
    verdict_hash: str
    verifier_reward: float | None = Field(None, exclude_if=lambda v: v is None)
    """Task trials: the verifier's reward (``reward`` is it plus ``score``, the judge's, 0 without a judge)."""
    judge_score: float | None = Field(None, exclude_if=lambda v: v is None)
    """Task trials judged by an LLM: its score in [0, 1]; None without a judge."""
    judge_usage: Usage | None = Field(None, exclude_if=lambda v: v is None)
    """Task trials judged by an LLM: the tokens its verdict was billed (once, whoever asked)."""
    verifier_provenance: str | None = Field(None, exclude_if=lambda v: v is None)
    """Task trials: the verifier outcome's ``provenance``; a reward whose provenance is flagged is never trained on."""
    unjudged: str | None = Field(None, exclude_if=lambda v: v is None)
    """Task trials with ``--judge-failure verifier-only`` whose judging failed for good: why. The reward is then
    the verifier's alone; None for every judged (or never-judged, ``--judge none``) reward."""


class StepResult(Record):
    """One row of the learning table."""

    step: int
    trials_planned: int
    trials_ok: int
    mean_reward: float | None
    mean_turns: float | None
    weights_version: int
    policy_hash: str
    actor_pid: int


FailedTrialPolicy = Literal["skip", "mask-group"]
"""What a step does with a trial that failed for good (the one definition; every config uses it)."""
