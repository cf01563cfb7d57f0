"""The planner reads a rollout run (``rollout_job``, a step's trials in one run) as a run of each trial it carries.

Runs are created in the home's real Dagster instance (not submitted: no daemon queues or launches them), and
their outcomes written as Dagster records them (a materialization, a failed run), so each state is exactly the
one under test. The last test trains through the CLI: a rollout run's own provenance records, for real.
"""

from __future__ import annotations

import uuid
from functools import partial

import dagster as dg

from rl_assets.assets.partitions import partitions_to_add, trial_partition_key
from rl_assets.assets.rollout_batches import batch_members, batch_run_config
from rl_assets.definitions import RECONSTRUCTABLE_JOBS, defs
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.run_tags import EXPERIMENT_TAG, ROLLOUT_STEP_TAG, RUBRIC_TAG
from rl_assets.domain.runtime import Runtime
from rl_assets.driver.failure_watch import run_error
from rl_assets.driver.planner import give_up_on_crashing, plan
from rl_assets_testkit.expectations import cli_args, oracle_expectation, table_of, train_json


def _experiment(home, stores, instance) -> ExperimentConfig:
    """A one-step experiment of two trials whose world is built, so the plan is about its trials."""
    config = ExperimentConfig(name=f"batch-{uuid.uuid4().hex[:8]}", steps=1, worlds=1, prompts=2, samples=1)
    stores.experiments.create_or_resume(config, Runtime())
    for name, keys in partitions_to_add(config, 1).items():
        instance.add_dynamic_partitions(name, [k for k in keys if not instance.has_dynamic_partition(name, k)])
    if "w0" not in instance.get_materialized_partitions(dg.AssetKey("worlds")):
        # Built for real: the home is shared, and a world's materialization is every experiment's input.
        world_job = defs.resolve_job_def("world_job")
        assert world_job.execute_in_process(
            instance=instance, partition_key="w0", tags={EXPERIMENT_TAG: config.name}
        ).success
    return config


def _rollout_run(instance, config: ExperimentConfig, keys: list[str]) -> dg.DagsterRun:
    recon = dg.reconstructable(RECONSTRUCTABLE_JOBS["rollout_job"])
    job_def = recon.get_definition()
    tags = {EXPERIMENT_TAG: config.name, RUBRIC_TAG: config.rubric, ROLLOUT_STEP_TAG: config.step_key(0)}
    return instance.create_run_for_job(
        job_def=job_def,
        run_config=batch_run_config(keys, judge_only=False),
        tags={**job_def.tags, **tags},
        job_code_origin=recon.get_python_origin(),
    )


def _states(instance, stores, config):
    p = plan(instance, stores, config)
    return {t.trial_id: (t.state, t.failures) for t in p.steps[0].trials}, p.launches


def test_a_rollout_run_is_a_run_of_each_trial_it_carries(home, stores, instance):
    config = _experiment(home, stores, instance)
    keys = [str(trial_partition_key(config, 0, slot)) for slot in ("p0-n0", "p1-n0")]
    states, launches = _states(instance, stores, config)
    assert states == {"s0-p0-n0": ("pending", 0), "s0-p1-n0": ("pending", 0)} and len(launches) == 2

    run = _rollout_run(instance, config, keys)
    assert batch_members(run.run_config) == keys
    states, launches = _states(instance, stores, config)
    assert states == {"s0-p0-n0": ("running", 0), "s0-p1-n0": ("running", 0)}, "in flight while the run is"
    assert launches == [], "nothing is launched twice"

    # The first trial ended with its reward; then the worker died (run monitoring fails the run).
    instance.report_runless_asset_event(dg.AssetMaterialization("rewards", partition=keys[0]))
    instance.report_run_failed(run, "the run's worker process died")
    states, launches = _states(instance, stores, config)
    assert states["s0-p0-n0"][0] == "ok", "the run's failure does not refuse a trial that ended in it"
    assert states["s0-p1-n0"] == ("pending", 1), "the unfinished trial lost a run"
    (again,) = launches
    assert (again.job, again.partition_key, again.generation, again.failures) == ("trial_job", keys[1], 1, 1)


def test_a_trial_is_given_up_after_its_rollout_runs_died_three_times(home, stores, instance):
    config = _experiment(home, stores, instance)
    keys = [str(trial_partition_key(config, 0, slot)) for slot in ("p0-n0", "p1-n0")]
    for _ in range(3):
        instance.report_run_failed(_rollout_run(instance, config, keys), "the run's worker process died")
    states, launches = _states(instance, stores, config)
    assert states == {"s0-p0-n0": ("pending", 3), "s0-p1-n0": ("pending", 3)}
    assert all(launch.failures == 3 for launch in launches), "the give-up rule sees each trial's failed runs"
    triage = give_up_on_crashing(stores, plan(instance, stores, config), partial(run_error, instance))
    assert sorted(t.trial_id for t in triage.failed_trials) == ["s0-p0-n0", "s0-p1-n0"] and not triage.launches
    why = "run: its runs failed 3 times, the last with: the run's worker process died"
    assert stores.attempts.failed_trials(config.name) == {"s0-p0-n0": why, "s0-p1-n0": why}


def test_trials_roll_out_after_materializations_reported_without_tags(home, instance):
    """The UI's "Report materialization" (a runless event) records no tags, so no data version. A rollout run
    records each trial's provenance from its parents' latest events, and such an event may be one of them: the
    experiment trains as the specification says all the same."""
    fields = dict(steps=1, worlds=1, prompts=2, samples=1)
    train_json(home, *cli_args(f"built-{uuid.uuid4().hex[:6]}", fields))  # its world built: not built again below
    # The latest events of trajectories' parent and of rewards' (of other partitions: nothing of this experiment).
    instance.report_runless_asset_event(dg.AssetMaterialization("worlds", partition="reported-by-hand"))
    instance.report_runless_asset_event(dg.AssetMaterialization("trajectories", partition="reported-by-hand|s0|p0-n0"))
    name = f"reported-{uuid.uuid4().hex[:6]}"
    result = train_json(home, *cli_args(name, fields))
    table, priors = oracle_expectation(ExperimentConfig(name=name, **fields))
    assert table_of(result) == table and result["weights"] == priors
