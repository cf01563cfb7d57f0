"""Group-relative advantages (GRPO): each trajectory's reward against the other samples of its task.

A step samples every task ``--samples`` times; those samples are a group, and the advantage of one is
``(reward - group mean) / (group std + EPS)``, the std being the sample (unbiased) one, as SkyRL and TRL
compute it. Two edge cases, both giving advantage 0 (no gradient from that group):

- a group of one sample (``--samples 1``, or the others failed for good): there is no baseline to
  compare with, so the sample carries no signal (its reward minus its own mean is 0);
- a group whose rewards are all equal (std 0): every sample is as good as the others; ``EPS`` keeps the
  division finite and the numerator is 0 anyway.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rl_assets.domain.models import Reward

EPS = 1e-6


def group_of(trial_id: str) -> str:
    """The prompt group of a trial: its id without the sample suffix (``s0-task-n1`` -> ``s0-task``)."""
    head, sep, sample = trial_id.rpartition("-n")
    if not sep or not sample.isdigit():
        raise ValueError(f"not a trial id with a sample index: {trial_id!r}")
    return head


def group_advantages(rewards: Sequence[float], groups: Sequence[str]) -> list[float]:
    """The advantage of each reward within its group (see the module's docstring for the edge cases)."""
    if len(rewards) != len(groups):
        raise ValueError("one group per reward")
    members: dict[str, list[float]] = {}
    for reward, group in zip(rewards, groups, strict=True):
        members.setdefault(group, []).append(reward)
    stats: dict[str, tuple[float, float]] = {}
    for group, values in members.items():
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        stats[group] = (mean, std)
    return [(r - stats[g][0]) / (stats[g][1] + EPS) for r, g in zip(rewards, groups, strict=True)]


def batch_advantages(batch: Sequence[Reward]) -> list[float]:
    """The advantages of a step's canonical batch, grouped by task (prompt)."""
    return group_advantages([r.reward for r in batch], [group_of(r.trial_id) for r in batch])
