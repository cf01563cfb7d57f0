"""The asset graph: worlds -> trajectories -> rewards -> weights, with rubrics -> rewards.

The loop's back-edge (weights of step s-1 feed trajectories and weights of
step s) is not a Dagster dependency, because Dagster rejects cycles between
assets; it is loaded explicitly from the checkpoint store and pinned in
metadata (``policy_hash``, ``policy_version``), and the driver orders steps.
"""

from rl_assets.assets.rewards import rewards
from rl_assets.assets.rubrics import rubrics
from rl_assets.assets.trajectories import trajectories
from rl_assets.assets.weights import weights
from rl_assets.assets.worlds import worlds

__all__ = ["rewards", "rubrics", "trajectories", "weights", "worlds"]
