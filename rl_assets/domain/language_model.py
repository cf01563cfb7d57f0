"""A language-model policy's record: what it was built from, how it is trained, and which checkpoint it is.

The weights themselves are files (safetensors) in a content-addressed checkpoint directory; the record
names that directory by the digest of its bytes, so a policy's ``content_hash`` (what the ledger pins)
changes with every byte of weights, optimiser state and RNG state, and never with where the home is.
"""

from __future__ import annotations

from pydantic import Field

from rl_assets.domain.record import Record

TINY_MODEL = "tiny"
"""``--model tiny``: a small causal LM built from a transformers config, seeded, with a byte-level tokenizer."""


class GRPORecipe(Record):
    """The hyper-parameters of a GRPO update besides the learning rate (the step's ``lr``)."""

    clip: float = Field(gt=0, allow_inf_nan=False, description="PPO-style clip range of the importance ratio.")
    kl_coef: float | None = Field(
        None, exclude_if=lambda v: v is None, description="Weight of the KL to the base model; None: no KL term."
    )
    micro_batch: int = Field(ge=1, description="Samples per forward/backward pass (gradients accumulate).")
    max_tokens: int = Field(ge=2, description="Longest sample (prompt + response); longer prompts keep their end.")


class StepStats(Record):
    """What one GRPO step saw and did: recorded in the checkpoint and the policy, so a run can be read back."""

    objective: str
    """``clipped-ratio`` (importance ratios against the rollout logprobs) or ``reinforce`` (no logprobs)."""
    token_source: str
    """``recorded`` (the server's own ids) or ``retokenized`` (the messages, tokenized by this model's tokenizer)."""
    samples: int
    groups: int
    response_tokens: int
    truncated_samples: int
    loss: float
    """The surrogate loss of the batch before the update (token mean)."""
    clipped_fraction: float
    kl: float | None = Field(None, exclude_if=lambda v: v is None)


class LanguageModelPolicy(Record):
    """A causal LM trained by GRPO: its base, its recipe, and the checkpoint of its current weights."""

    base: str
    """``tiny``, or the absolute path of a checkpoint directory transformers loads."""
    base_hash: str
    """The identity of the base weights: the tiny model's build version, or a digest of the directory's files."""
    recipe: GRPORecipe
    checkpoint: str | None = None
    """The digest of the checkpoint directory after the last step; None: the base weights, never trained."""
    parameters: int | None = Field(None, exclude_if=lambda v: v is None)
    stats: StepStats | None = Field(None, exclude_if=lambda v: v is None)
