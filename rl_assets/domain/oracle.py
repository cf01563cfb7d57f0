"""The whole reference workload in one process, in memory: the oracle.

No stores, no retries, no orchestration: just the specification run top to
bottom. Tests compare what the durable system produced against this, on any
configuration, so the orchestration can never change a number unnoticed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from rl_assets.domain.agent import run_agent
from rl_assets.domain.bandit import apply_step, step_summary
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy, Reward, Trajectory
from rl_assets.domain.rubrics import get_rubric
from rl_assets.domain.scoring import reward_of, simulated_judge
from rl_assets.domain.world import world_documents


class OracleStep(BaseModel):
    model_config = ConfigDict(frozen=True)

    step: int
    mean_reward: float | None
    mean_turns: float | None
    rewards: list[Reward]


class _MemoryTools:
    def __init__(self, files: dict[str, str]) -> None:
        self.files = dict(files)

    def read(self, path: str) -> str:
        return self.files[path]

    def write(self, path: str, text: str) -> None:
        self.files[path] = text


def oracle_run(config: ExperimentConfig, failed: frozenset[str] = frozenset()) -> tuple[list[OracleStep], Policy]:
    """Train ``config`` in memory; returns the per-step table and the final policy.

    ``failed`` lists trial ids that failed for good and are absent from their batch.
    """
    rubric = get_rubric(config.rubric)
    policy = Policy.initial(config.world_ids)
    steps = []
    for s in range(config.steps):
        rewards = []
        for spec in config.trials(s):
            if spec.trial_id in failed:
                continue
            rollout = run_agent(spec, policy.priors[spec.world_id], _MemoryTools(world_documents(spec.world_id)))
            trajectory = Trajectory(
                trial_id=spec.trial_id,
                world_id=spec.world_id,
                world_hash="",
                policy_version=policy.version,
                policy_hash=policy.content_hash,
                turns=rollout.turns,
                answer=rollout.answer,
                files_written=rollout.files_written,
            )
            rewards.append(reward_of(trajectory, simulated_judge(trajectory, rubric)))
        mean_reward, mean_turns = step_summary(rewards)
        steps.append(OracleStep(step=s, mean_reward=mean_reward, mean_turns=mean_turns, rewards=rewards))
        policy = apply_step(policy, rewards, config.lr)
    return steps, policy
