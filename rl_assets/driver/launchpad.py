"""Start an experiment from the Dagster launchpad: ``start_experiment_job``.

The job only records the experiment (refusing a changed config, like the CLI);
the driver sensor then builds its worlds and runs its steps.
"""

from typing import Literal

import dagster as dg
from pydantic import Field

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import ExecutionSettings, FaultConfig, Runtime
from rl_assets.resources.stores import StoresResource

_E = ExperimentConfig.model_fields
_X = ExecutionSettings.model_fields


class StartExperimentConfig(dg.Config):
    """An experiment of the reference workload; every field as in ``rl-assets train``."""

    name: str = Field(description=_E["name"].description)
    steps: int = Field(_E["steps"].default, description=_E["steps"].description)
    worlds: int = Field(_E["worlds"].default, description=_E["worlds"].description)
    prompts: int = Field(_E["prompts"].default, description=_E["prompts"].description)
    samples: int = Field(_E["samples"].default, description=_E["samples"].description)
    lr: float = Field(_E["lr"].default, description=_E["lr"].description)
    max_turns: int = Field(_E["max_turns"].default, description=_E["max_turns"].description)
    rubric: str = Field(_E["rubric"].default, description=_E["rubric"].description)
    generate_retries: int = Field(_E["generate_retries"].default, description=_E["generate_retries"].description)
    judge_retries: int = Field(_E["judge_retries"].default, description=_E["judge_retries"].description)
    failed_trial_policy: Literal["skip", "mask-group"] = Field(
        _E["failed_trial_policy"].default, description=_E["failed_trial_policy"].description
    )
    tool_latency_s: float = Field(_X["tool_latency_s"].default, description=_X["tool_latency_s"].description)
    judge_latency_s: float = Field(_X["judge_latency_s"].default, description=_X["judge_latency_s"].description)


@dg.op(description="Record an experiment; the driver sensor then trains it.")
def start_experiment(context: dg.OpExecutionContext, config: StartExperimentConfig, stores: StoresResource) -> None:
    fields = config.model_dump()
    execution = ExecutionSettings(
        tool_latency_s=fields.pop("tool_latency_s"), judge_latency_s=fields.pop("judge_latency_s")
    )
    experiment = ExperimentConfig(**fields)
    created = stores.stores.experiments.create_or_resume(experiment, Runtime(faults=FaultConfig(), execution=execution))
    context.log.info(f"experiment {experiment.name} {'created' if created else 'already exists; resuming'}")


@dg.job(description="Start (or resume) an experiment from the launchpad.")
def start_experiment_job() -> None:
    start_experiment()
