"""How an experiment is executed, as opposed to what it computes.

Fault injection and latencies change how long a run takes and which attempts
fail, never its results (every fault is survived by a retry that produces the
same output), so they may differ between invocations of the same experiment.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rl_assets.domain.seeding import rng


class FaultConfig(BaseModel):
    """Injected failures, each decided by a seeded draw per trial."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flaky_trial_rate: float = Field(
        0.0, ge=0, le=1, description="A trial's first attempt fails when its fault draw is below this."
    )
    judge_flake_rate: float = Field(
        0.0, ge=0, le=1, description="Judging's first attempt fails after the verdict is recorded."
    )
    hang_trial_rate: float = Field(
        0.0, ge=0, le=1, description="A trial's first attempt hangs until its timeout kills it."
    )
    crash_driver_at_step: int | None = Field(
        None, ge=0, description="The first driver attempt SIGKILLs itself after this step is trained."
    )

    def trial_flakes(self, trial_id: str) -> bool:
        """The first fault draw of the trial's own stream, as the agent makes it."""
        return rng("trial", trial_id).random() < self.flaky_trial_rate

    def judge_flakes(self, trial_id: str) -> bool:
        return rng("flake", trial_id).random() < self.judge_flake_rate

    def trial_hangs(self, trial_id: str) -> bool:
        return rng("hang", trial_id).random() < self.hang_trial_rate


class ExecutionSettings(BaseModel):
    """Latencies, timeouts and parallelism of one invocation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_latency_s: float = Field(0.0, ge=0, description="Simulated duration of one document read.")
    judge_latency_s: float = Field(0.0, ge=0, description="Simulated duration of one judge call.")
    trial_timeout_s: float = Field(120.0, gt=0, description="A rollout attempt is killed after this long.")
    judge_timeout_s: float = Field(120.0, gt=0, description="A judge call is abandoned after this long.")
    max_concurrent_trials: int = Field(2, ge=1, description="Trial runs the CLI driver executes at once.")


class Runtime(BaseModel):
    """Faults plus execution settings: recorded with the experiment, changeable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    faults: FaultConfig = FaultConfig()
    execution: ExecutionSettings = ExecutionSettings()
