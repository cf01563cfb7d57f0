"""How an experiment is executed, as opposed to what it computes.

Fault injection and latencies change how long a run takes and which attempts
fail, never its results (every fault is survived by a retry that produces the
same output), so they may differ between invocations of the same experiment.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from rl_assets.domain.experiment import MAX_STEPS
from rl_assets.domain.seeding import rng

MAX_LATENCY_S = 3600.0
"""A simulated latency above an hour per call is a typo (and would stall every trial)."""
MAX_TIMEOUT_S = 86_400.0
"""One day: longer than any real rollout or judge call, short enough to stay a usable deadline."""
MAX_CONCURRENT_TRIALS = 1024


def _rate(description: str) -> FieldInfo:
    return Field(0.0, ge=0, le=1, allow_inf_nan=False, description=f"{description} (0 to 1).")


class FaultConfig(BaseModel):
    """Injected failures, each decided by a seeded draw per trial."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flaky_trial_rate: float = _rate("A trial's first attempt fails when its fault draw is below this")
    judge_flake_rate: float = _rate("Judging's first attempt fails after the verdict is recorded")
    hang_trial_rate: float = _rate("A trial's first attempt hangs until its timeout kills it")
    crash_driver_at_step: int | None = Field(
        None,
        ge=0,
        le=MAX_STEPS - 1,
        description="The first driver attempt SIGKILLs itself after this step is trained (below --steps).",
    )

    def trial_flakes(self, trial_id: str) -> bool:
        """The first fault draw of the trial's own stream, as the agent makes it."""
        return rng("trial", trial_id).random() < self.flaky_trial_rate

    def judge_flakes(self, trial_id: str) -> bool:
        return rng("flake", trial_id).random() < self.judge_flake_rate

    def trial_hangs(self, trial_id: str) -> bool:
        return rng("hang", trial_id).random() < self.hang_trial_rate


class ExecutionSettings(BaseModel):
    """Latencies, timeouts and parallelism of one invocation.

    Every duration is a finite number of seconds with an upper bound, so no
    later ``time.sleep``, deadline or ``timedelta`` can overflow.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_latency_s: float = Field(
        0.0,
        ge=0,
        le=MAX_LATENCY_S,
        allow_inf_nan=False,
        description=f"Simulated duration of one document read, in seconds (0 to {MAX_LATENCY_S:g}).",
    )
    judge_latency_s: float = Field(
        0.0,
        ge=0,
        le=MAX_LATENCY_S,
        allow_inf_nan=False,
        description=f"Simulated duration of one judge call, in seconds (0 to {MAX_LATENCY_S:g}).",
    )
    trial_timeout_s: float = Field(
        120.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description=f"A rollout attempt is killed after this many seconds (above 0, at most {MAX_TIMEOUT_S:g}).",
    )
    judge_timeout_s: float = Field(
        120.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description=f"A judge call is abandoned after this many seconds (above 0, at most {MAX_TIMEOUT_S:g}).",
    )
    max_concurrent_trials: int = Field(
        8,
        ge=1,
        le=MAX_CONCURRENT_TRIALS,
        description=(
            f"Trials of the experiment the driver keeps in flight at once (1 to {MAX_CONCURRENT_TRIALS}), "
            "each waiting on its model and tools in a thread of a rollout run's worker."
        ),
    )
    trials_per_run: int = Field(
        MAX_CONCURRENT_TRIALS,
        ge=1,
        le=MAX_CONCURRENT_TRIALS,
        description=(
            f"Trials of one step the driver puts in one rollout run (1 to {MAX_CONCURRENT_TRIALS}), each with its "
            "own sandbox, records and retries (on Kubernetes each attempt's sandbox a pod, driven by the run's "
            "worker pod); 1: a run and a worker process per trial (on Kubernetes, a step pod per trial)."
        ),
    )


class Runtime(BaseModel):
    """Faults plus execution settings: recorded with the experiment, changeable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    faults: FaultConfig = FaultConfig()
    execution: ExecutionSettings = ExecutionSettings()
