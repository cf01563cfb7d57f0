"""An experiment: the desired state of one training run, and its trial plan.

The config is recorded once when the experiment is created; everything the
driver and the assets need (which worlds, which trials in which step, which
rubric) is derived from it, so no process has to remember anything.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rl_assets.domain.hashing import content_hash
from rl_assets.domain.models import FailedTrialPolicy, TrialSpec
from rl_assets.domain.names import (
    EXPERIMENT_NAME_RULE,
    RUBRIC_NAME_RULE,
    WORKLOAD_NAME_RULE,
    ExperimentName,
    RubricName,
    WorkloadName,
)

# Upper bounds: far above any real use of the reference workload, low enough that a typo
# (--steps 1000000000, --lr 1e300) is refused up front instead of exhausting memory or time later.
MAX_STEPS = 100_000
MAX_COUNT = 10_000
MAX_TRIALS_PER_STEP = 100_000
MAX_LR = 1000.0
MAX_TURNS = 1000
MAX_RETRIES = 100


class ExperimentConfig(BaseModel):
    """Everything that determines an experiment's results.

    Two runs with equal configs give byte-identical results, whatever faults
    were injected along the way; so changing any field of an existing
    experiment is refused instead of silently mixing two experiments. This
    model is the one schema of an experiment: the CLI's flags and the
    launchpad's config are derived from its fields, so each bound is
    written here only.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: ExperimentName = Field(description=f"Experiment name: {EXPERIMENT_NAME_RULE}.")
    steps: int = Field(3, ge=1, le=MAX_STEPS, description=f"Training steps (1 to {MAX_STEPS}).")
    worlds: int = Field(3, ge=1, le=MAX_COUNT, description=f"Worlds w0..w{{worlds-1}} (1 to {MAX_COUNT}).")
    prompts: int = Field(
        3, ge=1, le=MAX_COUNT, description=f"Prompts per step; prompt p uses world p % worlds (1 to {MAX_COUNT})."
    )
    samples: int = Field(
        2,
        ge=1,
        le=MAX_COUNT,
        description=f"Samples (trials) per prompt (1 to {MAX_COUNT}; prompts x samples at most {MAX_TRIALS_PER_STEP}).",
    )
    lr: float = Field(2.0, ge=0, le=MAX_LR, allow_inf_nan=False, description=f"Bandit learning rate (0 to {MAX_LR:g}).")
    max_turns: int = Field(6, ge=1, le=MAX_TURNS, description=f"Document reads allowed per trial (1 to {MAX_TURNS}).")
    rubric: RubricName = Field(
        "v1", description=f"Rubric (built-in or in the home's registry) to judge with; a name of {RUBRIC_NAME_RULE}."
    )
    generate_retries: int = Field(
        2, ge=0, le=MAX_RETRIES, description=f"Retries of a trial's rollout before it fails (0 to {MAX_RETRIES})."
    )
    judge_retries: int = Field(
        2, ge=0, le=MAX_RETRIES, description=f"Retries of a trial's judging before it fails (0 to {MAX_RETRIES})."
    )
    failed_trial_policy: FailedTrialPolicy = Field(
        "skip",
        description=(
            "What a step does with a trial that failed for good: 'skip' drops the trial, "
            "'mask-group' drops every trial of its prompt group."
        ),
    )
    workload: WorkloadName = Field(
        "reference",
        description=(
            "The registered workload (agent, judge and trainer) to run: 'reference' is the bandit of "
            f"reference-workload.md; a name of {WORKLOAD_NAME_RULE}. Configs stored before this field run 'reference'."
        ),
    )

    @model_validator(mode="after")
    def _bounded_batch(self) -> ExperimentConfig:
        if self.prompts * self.samples > MAX_TRIALS_PER_STEP:
            raise ValueError(
                f"prompts x samples (trials per step) must be at most {MAX_TRIALS_PER_STEP} "
                f"(got {self.prompts} x {self.samples})"
            )
        return self

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
        """The same experiment seen under another rubric: what re-scoring judges and trains with.

        Validated like any config (``model_copy`` would not be), so a rubric
        name from a tag or a request row is checked before it names a path.
        """
        return self.with_changes(rubric=rubric)

    def with_changes(self, **fields: object) -> ExperimentConfig:
        """This config with ``fields`` replaced, validated by the schema (a fork's name and rubric)."""
        return ExperimentConfig.model_validate({**self.model_dump(), **fields})

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
