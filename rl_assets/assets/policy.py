"""The explicit back-edge: the policy a step starts from."""

from __future__ import annotations

import dagster as dg

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy
from rl_assets.resources.stores import Stores


def parent_policy(stores: Stores, config: ExperimentConfig, step: int) -> Policy:
    """The policy after step ``step - 1`` (the initial policy for step 0).

    Loaded from the checkpoint the ledger points at, verified by hash; a step
    whose parent is not trained yet fails without retry, since retrying
    cannot help.
    """
    if step == 0:
        return Policy.initial(config.world_ids)
    applied = stores.training.get(config.name, config.rubric, step - 1)
    if applied is None:
        raise dg.Failure(
            f"step {step - 1} of {config.name} is not trained yet; step {step} cannot start",
            allow_retries=False,
        )
    policy = stores.checkpoints.load(config.name, config.rubric, step - 1, expected_hash=applied.policy_hash)
    if policy is None:
        raise dg.Failure(f"checkpoint of {config.name} step {step - 1} is missing", allow_retries=False)
    return policy
