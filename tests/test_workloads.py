"""Workloads: the seams are protocols the implementations satisfy, and a workload is chosen by config.

Also the example of a new workload: the reference workload with a judge that
scores correctness only, registered under its own name and selected by
``ExperimentConfig.workload``, its verdicts paid once through the same ledger.
"""

from __future__ import annotations

import inspect
import uuid
from dataclasses import replace

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Trajectory, Verdict
from rl_assets.domain.rubrics import AnyRubric
from rl_assets.domain.scoring import simulated_judge
from rl_assets.resources.faults import FaultySandbox
from rl_assets.resources.judge import JudgeResource
from rl_assets.resources.k8s_world_store import K8sWorldStoreResource
from rl_assets.resources.world_store import WorldStoreResource
from rl_assets.workloads import registry
from rl_assets.workloads.reference import BanditTrainer, ReferenceAgent, SimulatedJudge
from rl_assets.workloads.registry import REFERENCE, UnknownWorkloadError, Workload, register, workload_of
from rl_assets.workloads.seams import Agent, Judge, Sandbox, Trainer, WorldStore
from rl_assets_testkit.samples import RUBRIC, sample_trajectory


def _members(protocol: type) -> dict[str, object]:
    return {name: value for name, value in vars(protocol).items() if not name.startswith("_")}


def _nonconformities(implementation: type, protocol: type) -> list[str]:
    """What ``implementation`` lacks of ``protocol``: missing members, or methods whose signature differs."""
    problems = []
    for name, member in _members(protocol).items():
        if not hasattr(implementation, name):
            problems.append(f"{implementation.__name__} has no {name}")
        elif inspect.isfunction(member):
            wanted, got = inspect.signature(member), inspect.signature(getattr(implementation, name))
            if wanted != got:
                problems.append(f"{implementation.__name__}.{name}{got} is not {name}{wanted}")
    return problems


@pytest.mark.parametrize(
    "implementation, protocol",
    [
        (WorldStoreResource, WorldStore),
        (WorldStoreResource, Sandbox),
        (K8sWorldStoreResource, WorldStore),
        (K8sWorldStoreResource, Sandbox),
        (FaultySandbox, Sandbox),
        (ReferenceAgent, Agent),
        (SimulatedJudge, Judge),
        (BanditTrainer, Trainer),
    ],
)
def test_implementations_satisfy_their_seam(implementation, protocol):
    assert _members(protocol), f"{protocol.__name__} declares nothing"
    assert _nonconformities(implementation, protocol) == []


def test_the_check_catches_a_drifted_signature():
    class Drifted:
        def verdict(self, trajectory: Trajectory) -> Verdict: ...

    assert _nonconformities(Drifted, Judge) == [
        "Drifted has no judge_id",
        "Drifted.verdict(self, trajectory: 'Trajectory') -> 'Verdict' is not "
        "verdict(self, trajectory: 'Trajectory', rubric: 'AnyRubric') -> 'Verdict'",
    ]


def test_reference_is_the_default_and_old_configs_load_unchanged():
    config = ExperimentConfig(name="a")
    assert config.workload == "reference" and workload_of(config) is REFERENCE
    stored_before_the_field = {k: v for k, v in config.model_dump(mode="json").items() if k != "workload"}
    assert ExperimentConfig.model_validate(stored_before_the_field) == config


def test_an_unregistered_workload_is_named_in_the_error():
    with pytest.raises(UnknownWorkloadError, match="no workload named 'nope' \\(registered: .*reference"):
        workload_of(ExperimentConfig(name="a", workload="nope"))


class CorrectnessJudge:
    """Scores only whether the answer is right: the reference judge's verdict with the other weights at 0."""

    judge_id = "correctness-only-v1"

    def verdict(self, trajectory: Trajectory, rubric: AnyRubric) -> Verdict:
        only_correctness = rubric.model_copy(update={"efficiency_weight": 0.0, "tidiness_weight": 0.0})
        reference = simulated_judge(trajectory, only_correctness)
        return reference.model_copy(update={"rubric_hash": rubric.content_hash})


CORRECTNESS = replace(REFERENCE, name="correctness-only", judge=CorrectnessJudge())


@pytest.fixture(autouse=True)
def _registry_restored(monkeypatch):
    """The registry is per process: what a test here registers must not leak into the rest of the session."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_a_custom_workload_is_selected_by_config():
    register(CORRECTNESS)
    register(CORRECTNESS)  # registering the same workload again is harmless
    with pytest.raises(ValueError, match="already registered"):
        register(
            Workload(name="correctness-only", agent=ReferenceAgent(), judge=SimulatedJudge(), trainer=BanditTrainer())
        )
    assert _nonconformities(CorrectnessJudge, Judge) == []
    assert workload_of(ExperimentConfig(name="a", workload="correctness-only")) is CORRECTNESS


def test_a_custom_judge_is_paid_once_under_its_own_key(stores):
    register(CORRECTNESS)
    chosen = workload_of(ExperimentConfig(name="a", workload="correctness-only")).judge
    experiment, trajectory, resource = f"workload-{uuid.uuid4().hex[:8]}", sample_trajectory(), JudgeResource()
    verdict, hit = resource.judge(stores.verdicts, trajectory, RUBRIC, experiment, 0, 10, judge=chosen)
    assert not hit and verdict == CorrectnessJudge().verdict(trajectory, RUBRIC)
    assert verdict.score != simulated_judge(trajectory, RUBRIC).score, "the example judge must differ to show anything"
    again, hit = resource.judge(stores.verdicts, trajectory, RUBRIC, experiment, 0, 10, judge=chosen)
    assert hit and again == verdict
    assert resource.key(experiment, trajectory, RUBRIC, chosen) != resource.key(experiment, trajectory, RUBRIC)
    reference, hit = resource.judge(stores.verdicts, trajectory, RUBRIC, experiment, 0, 10)
    assert not hit and reference == simulated_judge(trajectory, RUBRIC), "another judge's verdict is never reused"
