"""Per-trial records on disk: trajectories, rewards, and the rollout cache.

Trajectories and rewards are stored per partition (what Dagster materialised);
rewards additionally per rubric, so re-scoring never overwrites another
rubric's results. The rollout cache is keyed by a trajectory's *identity*
(trial spec, world hash, policy hash, agent version), within one experiment:
a unit whose inputs are unchanged is found there and never generated twice,
while each experiment's counts stay its own.
"""

from __future__ import annotations

from rl_assets.domain.models import Reward, Trajectory
from rl_assets.stores.artifacts import ArtifactStore


class TrialRecords:
    def __init__(self, artifacts: ArtifactStore) -> None:
        self.artifacts = artifacts

    def cached_rollout(self, experiment: str, identity: str) -> Trajectory | None:
        return self.artifacts.read(f"rollouts/{experiment}/{identity}", Trajectory)

    def cache_rollout(self, experiment: str, identity: str, trajectory: Trajectory) -> None:
        self.artifacts.write(f"rollouts/{experiment}/{identity}", trajectory)

    def trajectory(self, experiment: str, step: int, slot: str) -> Trajectory | None:
        return self.artifacts.read(f"trajectories/{experiment}/s{step}/{slot}", Trajectory)

    def save_trajectory(self, experiment: str, step: int, slot: str, trajectory: Trajectory) -> None:
        self.artifacts.write(f"trajectories/{experiment}/s{step}/{slot}", trajectory)

    def reward(self, experiment: str, rubric: str, step: int, slot: str) -> Reward | None:
        return self.artifacts.read(f"rewards/{experiment}/{rubric}/s{step}/{slot}", Reward)

    def has_reward(self, experiment: str, rubric: str, step: int, slot: str) -> bool:
        return self.artifacts.exists(f"rewards/{experiment}/{rubric}/s{step}/{slot}")

    def save_reward(self, experiment: str, rubric: str, step: int, slot: str, reward: Reward) -> None:
        self.artifacts.write(f"rewards/{experiment}/{rubric}/s{step}/{slot}", reward)
