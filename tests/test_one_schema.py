"""One schema: the CLI's flags and the launchpad's config are generated from the domain models' fields."""

from __future__ import annotations

from rl_assets.cli.commands import TRAIN_FLAGS, build_parser
from rl_assets.domain.experiment import ExperimentConfig, is_derived
from rl_assets.domain.runtime import ExecutionSettings, FaultConfig
from rl_assets.driver.launchpad import LAUNCHPAD_FIELDS, StartExperimentConfig


def _train_actions() -> dict[str, object]:
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if a.dest == "command"]
    train = subparsers.choices["train"]
    return {a.dest: a for a in train._actions}


def test_every_field_of_the_models_is_a_train_flag_with_its_description_and_default():
    actions = _train_actions()
    for model in (ExperimentConfig, FaultConfig, ExecutionSettings):
        for name, field in model.model_fields.items():
            if is_derived(field):
                assert name not in actions, f"{name} is derived, never set by a flag"
                continue
            action = actions[name]
            assert action.help == (field.description or "").replace("%", "%%"), name
            assert action.required == field.is_required(), name
            if not field.is_required():
                assert action.default == field.default, name
    settable = [f for m in (ExperimentConfig, FaultConfig, ExecutionSettings) for f in m.model_fields.values()]
    assert len(TRAIN_FLAGS) == len([f for f in settable if not is_derived(f)])


def test_every_launchpad_field_carries_its_model_fields_type_default_and_description():
    launchpad = StartExperimentConfig.model_fields
    settable = {n for n, f in ExperimentConfig.model_fields.items() if not is_derived(f)}
    assert set(LAUNCHPAD_FIELDS[ExperimentConfig]) == settable, "all of the experiment a person sets"
    for model, names in LAUNCHPAD_FIELDS.items():
        for name in names:
            field = model.model_fields[name]
            assert launchpad[name].description == field.description, name
            if field.annotation != launchpad[name].annotation:  # an optional Literal or name, as an optional string
                shape = str(field.annotation)
                assert launchpad[name].annotation == str | None and ("Literal" in shape or "Annotated" in shape), name
            if not field.is_required():
                assert launchpad[name].default == field.default, name
