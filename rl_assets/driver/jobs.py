"""Jobs: the units the driver launches, one run per unit of work.

- ``world_job``: build and seal one world, and build (or find) its task's image;
- ``trial_job``: one trial, as two steps (generate, then judge) in separate
  processes with their own retries: a crash while judging never regenerates;
- ``judge_job``: one trial's judging alone, for re-scoring stored trajectories;
- ``rollout_job``: many trials (or a re-scoring's judgments) of one step in one run, each in a thread of
  its worker with its own records: what the driver launches (:mod:`rl_assets.assets.rollout_batches`);
- ``rollout_pods_job``: on Kubernetes, a batch's rollouts alone, each attempt's sandbox a pod, driven by one
  worker that holds no judge key; a judge-only ``rollout_job`` run judges them;
- ``train_job``: one training step on the Ray trainer.

Judging and training read the rubric from the run's ``rl/rubric`` tag (the
experiment's own rubric when absent), so a re-scoring, whether launched by
the driver or as a backfill from the UI, is the same assets under a tag.
Where their steps run is the environment's choice (:mod:`rl_assets.driver.deployment`).
"""

from __future__ import annotations

import dagster as dg

from rl_assets.assets.partitions import STEP, TRIAL, WORLD
from rl_assets.assets.rewards import rewards
from rl_assets.assets.rollout_batches import ROLLOUT_PODS_JOB, roll_out_trials
from rl_assets.assets.task_images import task_images
from rl_assets.assets.trajectories import trajectories
from rl_assets.assets.weights import weights
from rl_assets.assets.worlds import worlds
from rl_assets.domain.run_tags import KIND_TAG
from rl_assets.driver.deployment import resources, unit_executor
from rl_assets.resources.judge import JudgeResource

world_job = dg.define_asset_job(
    "world_job",
    selection=[worlds, task_images],
    partitions_def=WORLD,
    executor_def=dg.in_process_executor,
    tags={KIND_TAG: "world"},
    description="Build and seal one world; build its task's image once (a container task).",
)

trial_job = dg.define_asset_job(
    "trial_job",
    selection=[trajectories, rewards],
    partitions_def=TRIAL,
    executor_def=unit_executor(),
    tags={KIND_TAG: "trial"},
    description="One trial, in its own process: its rollout (in a sandbox process), then its judging.",
)

judge_job = dg.define_asset_job(
    "judge_job",
    selection=[rewards],
    partitions_def=TRIAL,
    executor_def=unit_executor(),
    tags={KIND_TAG: "judge"},
    description="Judge one stored trajectory under the run's rubric (re-scoring); never generates.",
)

train_job = dg.define_asset_job(
    "train_job",
    selection=[weights],
    partitions_def=STEP,
    executor_def=unit_executor(),
    tags={KIND_TAG: "train"},
    description="One training step on the trainer actor.",
)


@dg.job(
    name="rollout_job",
    executor_def=dg.in_process_executor,
    tags={KIND_TAG: "rollouts", "dagster/max_retries": "0"},
    description="A step's trials in one worker, each in a thread with its own sandbox, records and retries.",
)
def rollout_job() -> None:
    roll_out_trials()


@dg.job(
    name=ROLLOUT_PODS_JOB,
    executor_def=dg.in_process_executor,
    resource_defs={**resources(), "judge": JudgeResource()},  # a judge without a key: it never judges
    tags={KIND_TAG: "rollouts", "dagster/max_retries": "0"},
    description=(
        "Kubernetes: a step's trials rolled out by one worker, each attempt's sandbox a pod of its own "
        "(rollout_only); a judge-only rollout_job run, in a pod with the judge's key, judges them."
    ),
)
def rollout_pods_job() -> None:
    roll_out_trials()
