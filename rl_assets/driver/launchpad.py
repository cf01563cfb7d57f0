"""Start, fork and re-score experiments from the Dagster launchpad.

Each job only records what is wanted (refusing a changed config or an
unknown rubric, like the CLI); the driver sensor then launches the runs.
``start_experiment_job`` records a new experiment; ``fork_experiment_job`` a
copy of one under another rubric, which reuses every rollout whose identity
is unchanged; ``rescore_experiment_job`` a re-scoring of a finished one.
"""

from typing import Literal

import dagster as dg
from pydantic import Field, ValidationError

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import ExecutionSettings, FaultConfig, Runtime
from rl_assets.resources.stores import StoresResource

_E = ExperimentConfig.model_fields
_X = ExecutionSettings.model_fields
_F = FaultConfig.model_fields


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
    trial_timeout_s: float = Field(_X["trial_timeout_s"].default, description=_X["trial_timeout_s"].description)
    judge_timeout_s: float = Field(_X["judge_timeout_s"].default, description=_X["judge_timeout_s"].description)
    # Fault injection, as `rl-assets train --flaky-trial-rate ...`. (A driver crash has no launchpad
    # form: the daemon's sensor is the driver here; kill the daemon pod instead.)
    flaky_trial_rate: float = Field(0.0, description=_F["flaky_trial_rate"].description)
    judge_flake_rate: float = Field(0.0, description=_F["judge_flake_rate"].description)
    hang_trial_rate: float = Field(0.0, description=_F["hang_trial_rate"].description)


_EXECUTION_FIELDS = ("tool_latency_s", "judge_latency_s", "trial_timeout_s", "judge_timeout_s")
_FAULT_FIELDS = ("flaky_trial_rate", "judge_flake_rate", "hang_trial_rate")


@dg.op(description="Record an experiment; the driver sensor then trains it.")
def start_experiment(context: dg.OpExecutionContext, config: StartExperimentConfig, stores: StoresResource) -> None:
    fields = config.model_dump()
    try:  # the same validation as the CLI's (rates in [0, 1], positive timeouts), with the same messages
        execution = ExecutionSettings(**{k: fields.pop(k) for k in _EXECUTION_FIELDS})
        faults = FaultConfig(**{k: fields.pop(k) for k in _FAULT_FIELDS})
        experiment = ExperimentConfig(**fields)
    except ValidationError as err:
        raise dg.Failure(f"invalid experiment config: {err}", allow_retries=False) from None
    created = stores.stores.experiments.create_or_resume(experiment, Runtime(faults=faults, execution=execution))
    context.log.info(f"experiment {experiment.name} {'created' if created else 'already exists; resuming'}")


@dg.job(description="Start (or resume) an experiment from the launchpad.")
def start_experiment_job() -> None:
    start_experiment()


class ForkExperimentConfig(dg.Config):
    """A new experiment: the parent's config under another rubric, reusing unchanged rollouts."""

    parent: str = Field(description="The experiment to fork.")
    name: str = Field(description=_E["name"].description)
    rubric: str = Field(description="Rubric of the fork (built-in or in the home's registry).")


@dg.op(description="Record a fork of an experiment; the driver sensor then trains it.")
def fork_experiment(context: dg.OpExecutionContext, config: ForkExperimentConfig, stores: StoresResource) -> None:
    state = stores.stores
    rubric = state.rubrics.get(config.rubric)
    fork = state.experiments.get(config.parent).model_copy(update={"name": config.name, "rubric": rubric.name})
    fork = ExperimentConfig.model_validate(fork.model_dump())
    created = state.experiments.create_or_resume(fork, Runtime(), forked_from=config.parent)
    context.log.info(f"fork {fork.name} of {config.parent} {'created' if created else 'already exists; resuming'}")


@dg.job(description="Fork an experiment under another rubric from the launchpad.")
def fork_experiment_job() -> None:
    fork_experiment()


class RescoreExperimentConfig(dg.Config):
    """Judge a finished experiment's stored trajectories under another rubric and retrain from them."""

    experiment: str = Field(description="The finished experiment to re-score.")
    rubric: str = Field(description="Rubric to re-score with (built-in or in the home's registry).")


@dg.op(description="Record a re-scoring; the driver sensor then judges and retrains, never generating.")
def rescore_experiment(context: dg.OpExecutionContext, config: RescoreExperimentConfig, stores: StoresResource) -> None:
    state = stores.stores
    state.experiments.get(config.experiment)
    rubric = state.rubrics.get(config.rubric)
    new = state.scorings.request(config.experiment, rubric.name, requested_by=f"launchpad run {context.run_id}")
    status = "requested" if new else "already requested"
    context.log.info(f"re-scoring of {config.experiment} with {rubric.name} {status}")


@dg.job(description="Re-score a finished experiment under another rubric from the launchpad.")
def rescore_experiment_job() -> None:
    rescore_experiment()
