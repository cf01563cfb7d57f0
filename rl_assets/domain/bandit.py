"""The bandit update: the stand-in for a gradient step.

It is a pure function of the parent policy and the canonical batch, so a
replayed step computes the same policy, and "applied exactly once" is a
property of the ledger around it, not of this code.
"""

from __future__ import annotations

from rl_assets.domain.models import Policy, Reward


def canonical_batch(rewards: list[Reward]) -> list[Reward]:
    """The step's rewards sorted by trial id: the order every replay sees."""
    return sorted(rewards, key=lambda r: r.trial_id)


def apply_step(policy: Policy, rewards: list[Reward], lr: float) -> Policy:
    """Add ``lr * reward`` to the found document's prior for each positive reward."""
    priors = {w: list(p) for w, p in policy.priors.items()}
    for r in canonical_batch(rewards):
        if r.found_doc is not None and r.reward > 0:
            priors[r.world_id][r.found_doc] += lr * r.reward
    return Policy(version=policy.version + 1, priors=priors)


def step_summary(rewards: list[Reward]) -> tuple[float | None, float | None]:
    """(mean reward rounded to 3, mean turns rounded to 2), or Nones for an empty step."""
    if not rewards:
        return None, None
    mean_reward = round(sum(r.reward for r in rewards) / len(rewards), 3)
    mean_turns = round(sum(r.turns for r in rewards) / len(rewards), 2)
    return mean_reward, mean_turns
