"""The run tags rl-assets reads and writes: how a run says what it is for.

They are the planner's index into Dagster's run storage (experiment,
partition, rubric), and run monitoring's way to find a run's worker. Tags are
user input too (a UI backfill sets ``rl/rubric``), so a name read from one is
checked like any other before it is used.
"""

from collections.abc import Mapping

from rl_assets.domain.names import InvalidNameError, check_rubric_name

KIND_TAG = "rl/kind"
EXPERIMENT_TAG = "rl/experiment"
PARTITION_TAG = "rl/partition"
RUBRIC_TAG = "rl/rubric"
"""The rubric a run judges and trains with; absent means the experiment's own."""
ROLLOUT_STEP_TAG = "rl/rollout_step"
"""The step whose trials a rollout run (``rollout_job``) carries: how the planner finds the runs of a step's trials."""
WORKER_PID_TAG = "rl/worker_pid"
"""``pid@start-time`` of the process executing the run."""


def rubric_of(tags: Mapping[str, str], default: str) -> str:
    """The rubric a run's tags name (else ``default``), checked by its pattern before it names any file."""
    try:
        return check_rubric_name(tags.get(RUBRIC_TAG, default))
    except InvalidNameError as err:
        raise InvalidNameError(f"run tag {RUBRIC_TAG}: {err}") from None
