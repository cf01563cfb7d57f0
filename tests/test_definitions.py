"""The code location: graph shape, launchpad config and the driver sensor."""

from __future__ import annotations

import dagster as dg
import pytest

from rl_assets.assets.partitions import parse_trial_partition, partitions_to_add, trial_partition_key
from rl_assets.definitions import defs
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import Runtime
from rl_assets.driver.planner import plan
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
        "task_images": [],
        "trajectories": ["task_images", "worlds"],
        "rewards": ["rubrics", "trajectories"],
        "weights": ["rewards"],
    }
    assert graph.get(dg.AssetKey("rubrics")).is_observable, "a rubric change marks rewards stale, nothing upstream"
    assert graph.get(dg.AssetKey("weights")).backfill_policy == dg.BackfillPolicy.single_run(), (
        "a retraining backfill trains the chain in one run, in step order"
    )


STEP = dg.DynamicPartitionsDefinition(name="step")
TRIAL = dg.MultiPartitionsDefinition({"step": STEP, "trial": dg.DynamicPartitionsDefinition(name="trial")})


def test_each_asset_has_its_partitions_and_each_edge_its_mapping():
    graph = defs.resolve_asset_graph()

    def partitions(asset: str) -> dg.PartitionsDefinition | None:
        return graph.get(dg.AssetKey(asset)).partitions_def

    def mapping(child: str, parent: str) -> dg.PartitionMapping:
        return graph.get_partition_mapping(dg.AssetKey(child), dg.AssetKey(parent))

    assert partitions("rubrics") is None
    assert partitions("worlds") == partitions("task_images") == dg.DynamicPartitionsDefinition(name="world")
    assert partitions("trajectories") == TRIAL and partitions("rewards") == TRIAL
    assert [d.name for d in partitions("rewards").partitions_defs] == ["step", "trial"]
    assert partitions("weights") == STEP
    assert isinstance(mapping("trajectories", "worlds"), dg.AllPartitionMapping), "any world a step's prompts use"
    assert isinstance(mapping("trajectories", "task_images"), dg.AllPartitionMapping)
    assert isinstance(mapping("rewards", "trajectories"), dg.IdentityPartitionMapping)
    assert isinstance(mapping("rewards", "rubrics"), dg.AllPartitionMapping)
    assert mapping("weights", "rewards") == dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="step")


def test_partition_keys_and_what_each_mapping_maps_them_to():
    """The keys the driver adds, and the upstream partitions Dagster derives from them through the mappings."""
    config = ExperimentConfig(name="ref", worlds=2, prompts=2, samples=2)
    assert partitions_to_add(config, 2) == {
        "world": ["w0", "w1"],
        "trial": ["p0-n0", "p0-n1", "p1-n0", "p1-n1"],
        "step": ["ref/s0", "ref/s1"],
    }
    key = trial_partition_key(config, 1, "p0-n1")
    assert str(key) == "ref/s1|p0-n1" and key.keys_by_dimension == {"step": "ref/s1", "trial": "p0-n1"}
    assert parse_trial_partition(key) == parse_trial_partition("ref/s1|p0-n1") == ("ref", 1, "p0-n1")

    graph = defs.resolve_asset_graph()
    with dg.instance_for_test() as instance:
        for name, keys in partitions_to_add(config, 2).items():
            instance.add_dynamic_partitions(name, keys)
        instance.add_dynamic_partitions("step", ["other/s1"])

        def upstream(child: str, parent: str, keys: list[str]) -> set[str]:
            child_def = graph.get(dg.AssetKey(child)).partitions_def
            parent_def = graph.get(dg.AssetKey(parent)).partitions_def
            with dg.partition_loading_context(dynamic_partitions_store=instance):
                result = graph.get_partition_mapping(
                    dg.AssetKey(child), dg.AssetKey(parent)
                ).get_upstream_mapped_partitions_result_for_partitions(
                    child_def.empty_subset().with_partition_keys(keys), child_def, parent_def
                )
            return set(result.partitions_subset.get_partition_keys())

        slots = config.trial_slots()
        assert upstream("weights", "rewards", ["ref/s1"]) == {f"ref/s1|{slot}" for slot in slots}, (
            "a step trains on every trial of its own step, no other step's, no other experiment's"
        )
        assert upstream("rewards", "trajectories", ["ref/s0|p1-n0"]) == {"ref/s0|p1-n0"}
        assert upstream("trajectories", "worlds", ["ref/s0|p1-n0"]) == {"w0", "w1"}


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
    assert "from-ui" in stores.drives.open(), "the launchpad asks the driver sensor to train it"


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
    """What a driver tick requests for an experiment, computed twice from the same state, is the same."""
    from rl_assets.assets.partitions import trial_partition_key
    from rl_assets.assets.rollout_batches import batch_members
    from rl_assets.driver.sensor import ROLLOUT_JOBS, TRAINING_JOBS, partition_requests_of, run_requests_of

    config = ExperimentConfig(name="sensed", steps=1, worlds=1, prompts=2, samples=1)
    stores.experiments.create_or_resume(config, Runtime())  # recorded, not requested: no daemon drives it
    world_store = defs.resources["world_store"]

    def tick() -> tuple[list[dg.RunRequest], list[dg.AddDynamicPartitionsRequest]]:
        plans = [plan(instance, stores, config)]
        return run_requests_of(stores, plans, world_store, print, ROLLOUT_JOBS), partition_requests_of(instance, plans)

    (first, partitions), (second, _) = tick(), tick()
    keys = sorted(r.run_key for r in first)
    assert keys and keys == sorted(r.run_key for r in second)
    other = config.with_changes(name="sensed-too")  # the same worlds: a world's partition is shared
    stores.experiments.create_or_resume(other, Runtime())
    other_plans = [plan(instance, stores, other)]
    theirs = {r.run_key for r in run_requests_of(stores, other_plans, world_store, print, ROLLOUT_JOBS)}
    assert theirs and not theirs & set(keys), "Dagster launches a run key once: each experiment's keys are its own"
    assert run_requests_of(stores, other_plans, world_store, print, TRAINING_JOBS) == [], "no step to train yet"
    built = instance.get_materialized_partitions(dg.AssetKey("worlds"))
    assert {r.job_name for r in first} == ({"rollout_job"} if "w0" in built else {"world_job"})
    if "w0" in built:  # the step's two trials in one rollout run
        (rollout,) = first
        assert batch_members(rollout.run_config) == [str(trial_partition_key(config, 0, s)) for s in ("p0-n0", "p1-n0")]
    added = {(r.partitions_def_name, k) for r in partitions for k in r.partition_keys}
    if "w0" not in built and not instance.has_dynamic_partition("world", "w0"):
        assert ("world", "w0") in added  # worlds first; the step opens once they are built
    elif "w0" in built and not instance.has_dynamic_partition("step", "sensed/s0"):
        assert ("step", "sensed/s0") in added
