"""The code location: graph shape, launchpad config and the driver sensor."""

from __future__ import annotations

import dagster as dg
import pytest

from rl_assets.definitions import defs
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import Runtime
from rl_assets.stores.experiments import UnknownExperimentError


def test_definitions_validate_and_the_graph_is_worlds_trajectories_rewards_weights_with_rubrics_into_rewards():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    parents = {
        k.to_user_string(): sorted(p.to_user_string() for p in graph.get(k).parent_keys)
        for k in graph.get_all_asset_keys()
    }
    assert parents == {
        "rubrics": [],
        "worlds": [],
        "trajectories": ["worlds"],
        "rewards": ["rubrics", "trajectories"],
        "weights": ["rewards"],
    }
    assert graph.get(dg.AssetKey("rubrics")).is_observable, "a rubric change marks rewards stale, nothing upstream"
    mapping = graph.get_partition_mapping(dg.AssetKey("weights"), dg.AssetKey("rewards"))
    assert isinstance(mapping, dg.MultiToSingleDimensionPartitionMapping)
    assert graph.get(dg.AssetKey("weights")).backfill_policy == dg.BackfillPolicy.single_run(), (
        "a retraining backfill trains the chain in one run, in step order"
    )


def test_launchpad_config_is_typed_and_documented(home):
    job = defs.resolve_job_def("start_experiment_job")
    ok = {"ops": {"start_experiment": {"config": {"name": "ui", "steps": 2}}}}
    assert dg.validate_run_config(job, ok)
    try:
        dg.validate_run_config(job, {"ops": {"start_experiment": {"config": {"name": "ui", "stepz": 2}}}})
        raise AssertionError("a typo in the launchpad config must be rejected")
    except dg.DagsterInvalidConfigError as err:
        assert "stepz" in str(err)
    from rl_assets.driver.launchpad import start_experiment

    fields = start_experiment.config_schema.config_type.fields
    assert fields["steps"].description == ExperimentConfig.model_fields["steps"].description


def test_launchpad_records_the_experiment(home, stores, instance):
    job = defs.resolve_job_def("start_experiment_job")
    result = job.execute_in_process(
        run_config={"ops": {"start_experiment": {"config": {"name": "from-ui", "steps": 1, "prompts": 1}}}},
        instance=instance,
    )
    assert result.success
    assert stores.experiments.get("from-ui") == ExperimentConfig(name="from-ui", steps=1, prompts=1)


def test_launchpad_injects_faults_and_refuses_a_bad_rate(home, stores, instance):
    job = defs.resolve_job_def("start_experiment_job")
    chaos = {"name": "ui-chaos", "steps": 1, "flaky_trial_rate": 0.25, "judge_flake_rate": 0.3, "trial_timeout_s": 30}
    result = job.execute_in_process(run_config={"ops": {"start_experiment": {"config": chaos}}}, instance=instance)
    assert result.success
    runtime = stores.experiments.runtime("ui-chaos")
    assert (runtime.faults.flaky_trial_rate, runtime.faults.judge_flake_rate) == (0.25, 0.3)
    assert runtime.execution.trial_timeout_s == 30

    bad = {"name": "ui-bad", "steps": 1, "hang_trial_rate": 1.5}
    result = job.execute_in_process(
        run_config={"ops": {"start_experiment": {"config": bad}}}, instance=instance, raise_on_error=False
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "hang_trial_rate" in failure.step_failure_data.error.message
    assert "less than or equal to 1" in failure.step_failure_data.error.message
    with pytest.raises(UnknownExperimentError):
        stores.experiments.get("ui-bad")  # nothing was recorded


def test_sensor_plans_deterministic_run_requests_for_an_unstarted_experiment(home, stores, instance):
    config = ExperimentConfig(name="sensed", steps=1, worlds=1, prompts=2, samples=1)
    stores.experiments.create_or_resume(config, Runtime())
    sensor = defs.resolve_sensor_def("driver_sensor")
    resources = {"stores": defs.resources["stores"], "world_store": defs.resources["world_store"]}
    with dg.build_sensor_context(instance=instance, definitions=defs, resources=resources) as context:
        first = sensor(context)
    with dg.build_sensor_context(instance=instance, definitions=defs, resources=resources) as context:
        second = sensor(context)
    keys = sorted(r.run_key for r in first.run_requests if r.tags.get("rl/experiment") == "sensed")
    assert keys and keys == sorted(r.run_key for r in second.run_requests if r.tags.get("rl/experiment") == "sensed")
    jobs = {r.job_name for r in first.run_requests if r.tags.get("rl/experiment") == "sensed"}
    built = instance.get_materialized_partitions(dg.AssetKey("worlds"))
    assert jobs == ({"trial_job"} if "w0" in built else {"world_job"})
    added = {(r.partitions_def_name, k) for r in first.dynamic_partitions_requests for k in r.partition_keys}
    if "w0" not in built and not instance.has_dynamic_partition("world", "w0"):
        assert ("world", "w0") in added  # worlds first; the step opens once they are built
    elif "w0" in built and not instance.has_dynamic_partition("step", "sensed/s0"):
        assert ("step", "sensed/s0") in added
