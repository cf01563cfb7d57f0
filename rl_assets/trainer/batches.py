"""A step's training batch, assembled from the reward store.

Shared by the ``weights`` asset, which trains on it, and the read paths
(results, ``status``, ``report``), which summarise it; it lives outside the
asset modules so that reading results never imports (or runs) an asset's
repair path. How a damaged reward is handled is the caller's: the asset
quarantines it (:func:`rl_assets.stores.quarantine.read_or_quarantine`),
a read path only reports it (:func:`recorded_batch`).
"""

from __future__ import annotations

from collections.abc import Callable

from rl_assets.domain.bandit import canonical_batch
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Reward, TrialSpec
from rl_assets.stores.artifacts import CorruptArtifactError
from rl_assets.stores.home_stores import Stores

RewardReader = Callable[[TrialSpec, str], Reward | None]
"""``(trial spec, trial slot) -> reward`` (None if there is none)."""


class DamagedRecordError(RuntimeError):
    """A record a result depends on was damaged."""


class UnsettledTrialError(RuntimeError):
    """A trial of the step has neither a reward nor a recorded failure: the step cannot train yet."""


def step_batch(
    config: ExperimentConfig, step: int, failed: dict[str, str], read: RewardReader
) -> tuple[list[Reward], list[str]]:
    """``(canonical batch, trial ids left out)`` of a step, given the trials that failed for good.

    A trial that failed for good is absent (``skip``), or takes its prompt group with it (``mask-group``),
    even if it has a reward: one that broke a blocking check (a flagged verifier) is stored, and never trained on.
    """
    present: dict[str, Reward] = {}
    missing = []
    for spec in config.trials(step):
        if spec.trial_id in failed:
            missing.append(spec.trial_id)
            continue
        reward = read(spec, spec.trial_id.split("-", 1)[1])
        if reward is None:
            raise UnsettledTrialError(
                f"{spec.trial_id} has neither a reward nor a recorded failure; its step cannot train yet"
            )
        present[spec.trial_id] = reward
    if config.failed_trial_policy == "mask-group":
        masked_groups = {t.rsplit("-", 1)[0] for t in missing}
        for trial_id in list(present):
            if trial_id.rsplit("-", 1)[0] in masked_groups:
                missing.append(trial_id)
                del present[trial_id]
    return canonical_batch(list(present.values())), sorted(missing)


def recorded_batch(state: Stores, config: ExperimentConfig, step: int) -> tuple[list[Reward], list[str]]:
    """The batch as recorded, for reading results: a damaged reward is reported, and left where it is."""

    def read(spec: TrialSpec, slot: str) -> Reward | None:
        try:
            return state.trials.reward(config.name, config.rubric, step, slot)
        except CorruptArtifactError as err:
            raise DamagedRecordError(
                f"the reward record of {spec.trial_id} is damaged ({err}); "
                "`rl-assets train` quarantines it, judges it again (from the recorded verdict) and retrains"
            ) from None

    return step_batch(config, step, state.attempts.failed_trials(config.name), read)
