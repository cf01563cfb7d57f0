"""Fault injection wraps the seams: only a unit's first attempt carries its faults, as drawn."""

from __future__ import annotations

from functools import partial

import pytest

from rl_assets.domain.agent import Rollout
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy
from rl_assets.domain.runtime import FaultConfig
from rl_assets.domain.scoring import simulated_judge
from rl_assets.resources.faults import FaultInjection, InjectedJudgeFault
from rl_assets.sandbox.protocol import ForkLayout, SandboxRequest
from rl_assets.workloads.registry import REFERENCE
from rl_assets.workloads.seams import AttemptFork, RequestFactory
from rl_assets_testkit.samples import RUBRIC, sample_trajectory

FORK = ForkLayout(kind="copy", lower="", upper="", work="", merged="/fork")


class RecordingSandbox:
    """Builds each attempt's request as a sandbox would, and keeps it instead of running it."""

    def __init__(self) -> None:
        self.requests: list[SandboxRequest] = []

    def rollout(self, fork: AttemptFork, make_request: RequestFactory, timeout_s: float) -> Rollout:
        self.requests.append(make_request(FORK))
        return Rollout(turns=[], answer="", files_written=[])


def _requests(faults: FaultConfig, attempt: int) -> dict[str, SandboxRequest]:
    config = ExperimentConfig(name="faults")
    policy = Policy.initial(config.world_ids)
    inner = RecordingSandbox()
    sandbox = FaultInjection(faults, attempt).sandbox(inner)  # type: ignore[arg-type]
    specs = config.trials(0)
    for spec in specs:
        request = partial(REFERENCE.agent.request, spec, policy, tool_latency_s=0.0)
        sandbox.rollout(AttemptFork(spec.world_id, config.name, spec.trial_id, 0), request, 5)
    return {spec.trial_id: request for spec, request in zip(specs, inner.requests, strict=True)}


def test_first_attempts_carry_the_drawn_faults_and_retries_none():
    faults = FaultConfig(flaky_trial_rate=0.25, hang_trial_rate=0.5)
    first, retry = _requests(faults, 0), _requests(faults, 1)
    assert {r.fail_below for r in first.values()} == {0.25}
    assert {t for t, r in first.items() if r.hang} == {t for t in first if faults.trial_hangs(t)} != set()
    assert all(r.fail_below == 0.0 and not r.hang for r in retry.values())
    assert all(first[t].model_copy(update={"fail_below": 0.0, "hang": False}) == retry[t] for t in first)


def test_without_faults_the_request_is_the_agents_own():
    assert all(not r.hang and r.fail_below == 0.0 for r in _requests(FaultConfig(), 0).values())


class AnsweringJudging:
    """The ledgered judging call, minus the ledger: every verdict is a cache hit."""

    def judge(self, ledger, trajectory, rubric, experiment, latency_s, timeout_s, judge):
        return judge.verdict(trajectory, rubric), True


def test_an_injected_judge_fault_comes_after_the_answer_and_says_how_it_was_had():
    faults, trajectory = FaultConfig(judge_flake_rate=1.0), sample_trajectory()
    first = FaultInjection(faults, 0).judging(AnsweringJudging())  # type: ignore[arg-type]
    with pytest.raises(InjectedJudgeFault, match="after the judge answered") as caught:
        first.judge(None, trajectory, RUBRIC, "faults", 0, 1, REFERENCE.judge)  # type: ignore[arg-type]
    assert caught.value.cache_hit is True
    retry = FaultInjection(faults, 1).judging(AnsweringJudging())  # type: ignore[arg-type]
    assert retry.judge(None, trajectory, RUBRIC, "faults", 0, 1, REFERENCE.judge) == (  # type: ignore[arg-type]
        simulated_judge(trajectory, RUBRIC),
        True,
    )
