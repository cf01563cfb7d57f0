"""Start, fork and re-score an experiment: every check before the request is recorded, in one place.

Each function checks everything it can before it writes, and writes only
through the stores' idempotent records (an experiment created or resumed, a
re-scoring requested), so a refused request leaves nothing behind and a
repeated one changes nothing. Recording that the home's driver should work on
an experiment is :func:`drive`, kept apart because the CLI audits the
experiment's records before it lets the driver loose on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pydantic import ValidationError

from rl_assets.application.launchpad_rules import LaunchpadRules, LaunchRefused
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.names import InvalidNameError, check_experiment_name, check_rubric_name, shown
from rl_assets.domain.rubrics import AnyRubric, kind_problem
from rl_assets.domain.runtime import Runtime
from rl_assets.domain.validation import in_words
from rl_assets.home.layout import Home
from rl_assets.workloads.registry import UnknownWorkloadError, workload_of

if TYPE_CHECKING:  # the stores pull in the database driver: a refusal before any service starts stays quick
    from rl_assets.stores.home_stores import Stores


class Refused(ValueError):
    """A request that is not recorded. ``field`` names the input at fault (a field of the experiment's config,
    or ``parent``/``name``/``experiment``/``rubric`` of a fork or re-scoring); None: the request as a whole."""

    def __init__(self, field: str | None, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


class RubricRegistryLike(Protocol):
    """What rubric resolution needs of a registry: the stores' (which pins each rubric's hash), or the home's
    files read before its services are up."""

    def get(self, name: str) -> AnyRubric: ...


def checked_name(check: Callable[[str], str], field: str, value: str) -> str:
    """``value`` if it is a valid name of its kind (before it names a row or a file)."""
    try:
        return check(value)
    except InvalidNameError as err:
        raise Refused(field, f"{err} (got {shown(value)})") from None


def usable_rubric(
    registry: RubricRegistryLike, name: str, config: ExperimentConfig | None = None, field: str = "rubric"
) -> AnyRubric:
    """The rubric called ``name``: known, valid, pinned to its hash by a pinning registry, and, with ``config``,
    of the kind the experiment's judge reads (weights for the deterministic judge, a prompt for an LLM)."""
    try:
        rubric = registry.get(name)
    except ValueError as err:  # unknown, an invalid file, or a changed one
        raise Refused(field, str(err)) from None
    if config is not None:
        check_kind(rubric, config, field)
    return rubric


def check_kind(rubric: AnyRubric, config: ExperimentConfig, field: str = "rubric") -> None:
    """Refuse a rubric the experiment's judge cannot read: weights for the deterministic judge, a prompt for an
    LLM."""
    if config.judge != "none" and (problem := kind_problem(rubric, llm_judge=config.judge == "llm")):
        raise Refused(field, problem)


def check_named_keys(home: Home, config: ExperimentConfig) -> None:
    """Refuse a key the experiment names that the home does not hold (locally; on Kubernetes keys are Secrets,
    mounted by the pods, never read here)."""
    from rl_assets.home.services.api_keys import ApiKeyError, ApiKeys
    from rl_assets.home.settings import settings

    if settings().env != "local":
        return
    for field in ("policy_key_name", "judge_key_name"):
        if (name := getattr(config, field)) is not None:
            try:
                ApiKeys(home).read(name)
            except (ApiKeyError, PermissionError) as err:
                raise Refused(field, str(err)) from None


def with_task_set(home: Home, config: ExperimentConfig) -> ExperimentConfig:
    """``config`` with its task set validated and recorded into the home (snapshots); others unchanged."""
    if config.tasks is None:
        return config
    from rl_assets.containers.runtime import containers_available
    from rl_assets.home.settings import settings
    from rl_assets.tasks.snapshot import TaskSetError, with_recorded_task_set

    on_kubernetes = settings().env == "kubernetes"
    containers = not on_kubernetes and containers_available()
    try:
        return with_recorded_task_set(config, home.tasks, on_kubernetes=on_kubernetes, containers=containers)
    except TaskSetError as err:
        raise Refused("tasks", str(err)) from None


def existing(stores: Stores, name: str, field: str = "experiment") -> ExperimentConfig:
    """The recorded experiment called ``name``."""
    from rl_assets.stores.experiments import UnknownExperimentError

    try:
        return stores.experiments.get(checked_name(check_experiment_name, field, name))
    except UnknownExperimentError as err:
        raise Refused(field, str(err)) from None


@dataclass(frozen=True)
class Recorded:
    """An experiment as recorded, and whether this request created it (False: it existed and is resumed)."""

    config: ExperimentConfig
    created: bool


def start(
    stores: Stores, home: Home, config: ExperimentConfig, runtime: Runtime, rules: LaunchpadRules | None = None
) -> Recorded:
    """Record ``config`` (or resume it, if recorded unchanged) once everything it names is usable.

    ``rules``: the owner's allowances, for a request made on someone's behalf (the launchpad's runs execute
    as the home's owner, whoever filled in the form); a command typed by the owner passes none.
    """
    usable_rubric(stores.rubrics, config.rubric, config)
    try:
        workload_of(config)  # registered in this code location, as the assets will need it
    except UnknownWorkloadError as err:
        raise Refused("workload", str(err)) from None
    if rules is not None:
        try:
            rules.check(config)
        except LaunchRefused as err:
            raise Refused(None, str(err)) from None
    check_named_keys(home, config)
    return _record(stores, with_task_set(home, config), runtime)


def fork(stores: Stores, home: Home, parent: str, name: str, rubric: str) -> Recorded:
    """Record ``name``: ``parent``'s config under another rubric, reusing every rollout whose identity is
    unchanged (the ``trajectories`` asset looks in the parent first)."""
    name = checked_name(check_experiment_name, "name", name)
    rubric = checked_name(check_rubric_name, "rubric", rubric)
    recorded = existing(stores, parent, "parent")
    check_named_keys(home, recorded)
    resolved = usable_rubric(stores.rubrics, rubric, recorded)
    try:
        config = recorded.with_changes(name=name, rubric=resolved.name)
    except ValidationError as err:
        first = err.errors()[0]
        raise Refused(str(first["loc"][0]) if first["loc"] else None, _message(first)) from None
    return _record(stores, config, Runtime(), forked_from=recorded.name)


@dataclass(frozen=True)
class Rescoring:
    """A re-scoring as requested: the experiment, the rubric, and whether the request is new (False: it was
    requested before, or the rubric is the experiment's own, so there is nothing to judge again)."""

    config: ExperimentConfig
    rubric: str
    new: bool


def rescore(
    stores: Stores, experiment: str, rubric: str, trained: Callable[[ExperimentConfig], bool], requested_by: str
) -> Rescoring:
    """Request that a trained experiment's stored trajectories be judged under ``rubric`` and the policy
    trained again from them; nothing is generated again.

    ``trained``: whether the experiment's own chain is done (the planner's answer over the caller's instance).
    ``requested_by``: who asked, kept with the request.
    """
    resolved = usable_rubric(stores.rubrics, checked_name(check_rubric_name, "rubric", rubric))  # pinned first
    config = existing(stores, experiment)
    check_kind(resolved, config)
    if not trained(config):
        raise Refused(None, f"experiment {config.name!r} is not trained yet; finish it with `rl-assets train` first")
    if resolved.name == config.rubric:
        return Rescoring(config, resolved.name, new=False)
    new = stores.scorings.request(config.name, resolved.name, requested_by=requested_by)
    return Rescoring(config, resolved.name, new)


def drive(stores: Stores, experiment: str, requested_by: str) -> None:
    """Ask the home's driver (the daemon's sensors) to work on ``experiment`` until it is done."""
    stores.drives.request(experiment, requested_by=requested_by)


def _record(stores: Stores, config: ExperimentConfig, runtime: Runtime, forked_from: str | None = None) -> Recorded:
    from rl_assets.stores.experiments import ExperimentConflictError

    try:
        return Recorded(config, stores.experiments.create_or_resume(config, runtime, forked_from=forked_from))
    except ExperimentConflictError as err:
        raise Refused(None, str(err)) from None


def _message(error: dict) -> str:
    message = in_words(error)
    return f"{message} (got {shown(error.get('input'))})" if error["loc"] else message
