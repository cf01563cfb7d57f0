"""The run tags rl-assets reads and writes: how a run says what it is for.

They are the planner's index into Dagster's run storage (experiment,
partition, rubric), and the reaper's way to find a run's worker.
"""

KIND_TAG = "rl/kind"
EXPERIMENT_TAG = "rl/experiment"
PARTITION_TAG = "rl/partition"
RUBRIC_TAG = "rl/rubric"
"""The rubric a run judges and trains with; absent means the experiment's own."""
WORKER_PID_TAG = "rl/worker_pid"
"""``pid@start-time`` of the process executing the run."""
SENSOR_REQUEST_TAG = "rl/sensor_request"
"""The run key of the driver sensor's request a run was created for (see :mod:`rl_assets.stores.sensor_requests`)."""
