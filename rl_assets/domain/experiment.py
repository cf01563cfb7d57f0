"""An experiment: the desired state of one training run, and its trial plan.

The config is recorded once when the experiment is created; everything the
driver and the assets need (which worlds, which trials in which step, which
rubric) is derived from it, so no process has to remember anything.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rl_assets.domain.hashing import content_hash
from rl_assets.domain.models import RUBRIC_NAME_PATTERN, TrialSpec

EXPERIMENT_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,39}$"


class ExperimentConfig(BaseModel):
    """Everything that determines an experiment's results.

    Two runs with equal configs give byte-identical results, whatever faults
    were injected along the way; so changing any field of an existing
    experiment is refused instead of silently mixing two experiments.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=EXPERIMENT_NAME_PATTERN, description="Experiment name.")
    steps: int = Field(3, ge=1, description="Training steps.")
    worlds: int = Field(3, ge=1, description="Worlds w0..w{worlds-1}.")
    prompts: int = Field(3, ge=1, description="Prompts per step; prompt p uses world p % worlds.")
    samples: int = Field(2, ge=1, description="Samples (trials) per prompt.")
    lr: float = Field(2.0, ge=0, description="Bandit learning rate.")
    max_turns: int = Field(6, ge=1, description="Document reads allowed per trial.")
    rubric: str = Field(
        "v1", pattern=RUBRIC_NAME_PATTERN, description="Rubric (built-in or in the home's registry) to judge with."
    )
    generate_retries: int = Field(2, ge=0, description="Retries of a trial's rollout before it fails for good.")
    judge_retries: int = Field(2, ge=0, description="Retries of a trial's judging before it fails for good.")
    failed_trial_policy: Literal["skip", "mask-group"] = Field(
        "skip",
        description=(
            "What a step does with a trial that failed for good: 'skip' drops the trial, "
            "'mask-group' drops every trial of its prompt group."
        ),
    )

    @property
    def config_hash(self) -> str:
        """Identity of the config; equal hashes mean the same experiment."""
        return content_hash(self.model_dump(mode="json"))

    @property
    def world_ids(self) -> list[str]:
        return [f"w{i}" for i in range(self.worlds)]

    def step_key(self, step: int) -> str:
        """The step's partition key: ``{experiment}/s{step}``."""
        return f"{self.name}/s{step}"

    def trial_slots(self) -> list[str]:
        """Trial partition keys, the same every step: ``p{p}-n{n}``."""
        return [f"p{p}-n{n}" for p in range(self.prompts) for n in range(self.samples)]

    def trials(self, step: int) -> list[TrialSpec]:
        """The step's trial specs, sorted by trial id (the canonical order)."""
        specs = [
            TrialSpec(
                trial_id=f"s{step}-p{p}-n{n}",
                step=step,
                prompt_index=p,
                sample_index=n,
                world_id=f"w{p % self.worlds}",
                max_turns=self.max_turns,
            )
            for p in range(self.prompts)
            for n in range(self.samples)
        ]
        return sorted(specs, key=lambda s: s.trial_id)

    def scored_with(self, rubric: str) -> ExperimentConfig:
        """The same experiment seen under another rubric: what re-scoring judges and trains with."""
        return self.model_copy(update={"rubric": rubric})

    def trial(self, step: int, slot: str) -> TrialSpec:
        """The spec of trial ``slot`` of ``step``; a clear error if it is not planned."""
        trial_id = f"s{step}-{slot}"
        for spec in self.trials(step):
            if spec.trial_id == trial_id:
                return spec
        raise KeyError(f"trial {trial_id} is not part of experiment {self.name}")


def parse_step_key(step_key: str) -> tuple[str, int]:
    """``"ref/s2"`` -> ``("ref", 2)``."""
    experiment, _, step = step_key.rpartition("/s")
    if not experiment or not step.isdigit():
        raise ValueError(f"not a step partition key: {step_key!r}")
    return experiment, int(step)
