"""Start, fork and re-score experiments from the Dagster launchpad.

Each job only records what is wanted; the driver sensor then launches the
runs. Every value is checked by the same schema as the CLI's flags (the
domain models, whose fields the configs are derived from), and the request by
the same functions as the CLI's (:mod:`rl_assets.application.experiments`),
before anything is recorded: a bad value, an unknown or invalid rubric, or a
changed config fails the run with one line, is not retried, and records
nothing.
``start_experiment_job`` records a new experiment; ``fork_experiment_job`` a
copy of one under another rubric, which reuses every rollout whose identity
is unchanged; ``rescore_experiment_job`` a re-scoring of a finished one.
"""

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import dagster as dg
from pydantic import BaseModel, Field, ValidationError, create_model

from rl_assets.application import experiments
from rl_assets.application.experiments import Refused
from rl_assets.application.launchpad_rules import LaunchpadRules, LaunchRefused
from rl_assets.domain.experiment import ExperimentConfig, is_derived
from rl_assets.domain.runtime import ExecutionSettings, FaultConfig, Runtime
from rl_assets.domain.validation import in_words
from rl_assets.driver.planner import plan
from rl_assets.home.layout import Home
from rl_assets.resources.stores import StoresResource

LAUNCHPAD_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {
    ExperimentConfig: tuple(name for name, info in ExperimentConfig.model_fields.items() if not is_derived(info)),
    ExecutionSettings: ("tool_latency_s", "judge_latency_s", "trial_timeout_s", "judge_timeout_s"),
    # A driver crash has no launchpad form (the daemon's sensor is the driver here; kill the daemon
    # pod instead), and parallelism is the run queue's, not the CLI driver's.
    FaultConfig: ("flaky_trial_rate", "judge_flake_rate", "hang_trial_rate"),
}
"""Which fields of the schema's models the launchpad sets; each keeps its model's type, default and description."""


def _launchpad_field(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    """A model field as a launchpad field: its type, default and description (the bounds stay in the model).

    Dagster's config schema cannot express a bound, so the op checks every
    value by building the model itself: one schema, one set of messages.
    """
    field = model.model_fields[name]
    annotation = _dagster_type(field.annotation)
    if field.is_required():
        return annotation, Field(description=field.description)
    return annotation, Field(field.default, description=field.description)


def _dagster_type(annotation: Any) -> Any:
    """Dagster's config has no optional ``Literal`` or checked name: such a field is an optional string, checked
    by the model."""
    args = get_args(annotation)
    if get_origin(annotation) in (Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        if get_origin(inner) in (Literal, Annotated):
            return str | None
    return annotation


StartExperimentConfig = create_model(
    "StartExperimentConfig",
    __base__=dg.Config,
    __doc__="An experiment (of any registered workload); every field as in ``rl-assets train``.",
    **{name: _launchpad_field(model, name) for model, names in LAUNCHPAD_FIELDS.items() for name in names},
)


def _refuse(refused: Refused | str) -> dg.Failure:
    """The run's failure for a bad config value: one line, and no retry (the config will not get better)."""
    return dg.Failure(f"invalid config: {refused}", allow_retries=False)


def _built(model: type[BaseModel], values: dict[str, Any]) -> Any:
    try:
        return model(**values)
    except ValidationError as err:
        first = err.errors()[0]
        message = in_words(first)
        raise _refuse(f"{first['loc'][0]}: {message}" if first["loc"] else message) from None


def _requested_by(context: dg.OpExecutionContext) -> str:
    return f"launchpad run {context.run_id}"


@dg.op(description="Record an experiment; the driver sensor then trains it.")
def start_experiment(context: dg.OpExecutionContext, config: StartExperimentConfig, stores: StoresResource) -> None:
    fields = config.model_dump()
    built = {model: _built(model, {n: fields[n] for n in names}) for model, names in LAUNCHPAD_FIELDS.items()}
    state, runtime = stores.stores, Runtime(faults=built[FaultConfig], execution=built[ExecutionSettings])
    home = Home(state.home)
    try:
        rules = LaunchpadRules.load(home.launchpad_rules)
        recorded = experiments.start(state, home, built[ExperimentConfig], runtime, rules)
    except (Refused, LaunchRefused) as err:
        raise _refuse(err) from None
    experiments.drive(state, recorded.config.name, _requested_by(context))
    status = "created" if recorded.created else "already exists; resuming"
    context.log.info(f"experiment {recorded.config.name} {status}")


@dg.job(description="Start (or resume) an experiment from the launchpad.")
def start_experiment_job() -> None:
    start_experiment()


class ForkExperimentConfig(dg.Config):
    """A new experiment: the parent's config under another rubric, reusing unchanged rollouts."""

    parent: str = Field(description="The experiment to fork.")
    name: str = Field(description=ExperimentConfig.model_fields["name"].description)
    rubric: str = Field(description="Rubric of the fork (built-in or in the home's registry).")


@dg.op(description="Record a fork of an experiment; the driver sensor then trains it.")
def fork_experiment(context: dg.OpExecutionContext, config: ForkExperimentConfig, stores: StoresResource) -> None:
    state = stores.stores
    try:
        recorded = experiments.fork(state, Home(state.home), config.parent, config.name, config.rubric)
    except Refused as err:
        raise _refuse(err) from None
    experiments.drive(state, recorded.config.name, _requested_by(context))
    status = "created" if recorded.created else "already exists; resuming"
    context.log.info(f"fork {recorded.config.name} of {config.parent} {status}")


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
    try:
        rescoring = experiments.rescore(
            state,
            config.experiment,
            config.rubric,
            trained=lambda c: plan(context.instance, state, c).done,
            requested_by=_requested_by(context),
        )
    except Refused as err:
        raise _refuse(err) from None
    name = rescoring.config.name
    if rescoring.rubric == rescoring.config.rubric:
        context.log.info(f"{name} is scored with {rescoring.rubric} already; nothing to re-score")
        return
    experiments.drive(state, name, _requested_by(context))
    status = "requested" if rescoring.new else "already requested"
    context.log.info(f"re-scoring of {name} with {rescoring.rubric} {status}")


@dg.job(description="Re-score a finished experiment under another rubric from the launchpad.")
def rescore_experiment_job() -> None:
    rescore_experiment()
