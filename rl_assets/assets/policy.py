"""The explicit back-edge: the policy a step starts from."""

from __future__ import annotations

from functools import partial

import dagster as dg

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy
from rl_assets.stores.home_stores import Stores
from rl_assets.stores.quarantine import read_or_quarantine
from rl_assets.workloads.registry import workload_of


def parent_policy(stores: Stores, config: ExperimentConfig, step: int) -> Policy:
    """The policy after step ``step - 1`` (the initial policy for step 0).

    Loaded from the checkpoint the ledger points at, verified by hash; a step
    whose parent is not trained yet fails without retry, since retrying
    cannot help, and a lost or damaged parent checkpoint marks the parent step
    damaged so the driver re-derives it first.
    """
    if step == 0:
        return workload_of(config).trainer.initial(config)
    applied = stores.training.get(config.name, config.rubric, step - 1)
    if applied is None:
        raise dg.Failure(
            f"step {step - 1} of {config.name} is not trained yet; step {step} cannot start",
            allow_retries=False,
        )
    checked = read_or_quarantine(
        stores.artifacts,
        stores.damage,
        partial(stores.checkpoints.load, config.name, config.rubric, step - 1, expected_hash=applied.policy_hash),
        "checkpoint",
        "step",
        config.step_key(step - 1),
    )
    if checked.record is None:
        raise dg.Failure(
            f"step {step - 1} of {config.name}: {checked.problem}; the driver re-derives it first",
            allow_retries=False,
        )
    return checked.record
