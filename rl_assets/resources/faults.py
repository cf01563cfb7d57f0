"""Injected faults, wrapped around the seams they break instead of written into them.

Every fault hits only the first attempt of its unit (the asset's retry number
0), is decided by a seeded draw (:class:`~rl_assets.domain.runtime.FaultConfig`),
and is survived by the retry that follows, so results never depend on faults.

- Judge: the judging step fails *after* the verdict is recorded, so this wraps
  the ledgered call (:meth:`JudgeResource.judge`), not the pure
  :class:`~rl_assets.workloads.seams.Judge`: the retry must find the verdict
  paid for and not call the judge again.
- Sandbox: a rollout attempt fails or hangs inside its sandbox. The
  failure is decided by the trial's fault draw, which is the first draw of the
  agent's own seeded stream (docs/reference-workload.md, "Trials", step 2) and is
  made in the sandbox, so the wrapper only sets the request's ``fail_below``
  and ``hang``, and the sandboxed agent acts on them at that draw. Only the
  environment's :class:`~rl_assets.workloads.seams.Sandbox` is wrapped: its
  :class:`~rl_assets.workloads.seams.WorldStore` is the same with faults or without.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from rl_assets.domain.agent import Rollout
from rl_assets.domain.models import Trajectory, Verdict, VerifierOutcome
from rl_assets.domain.rubrics import AnyRubric
from rl_assets.domain.runtime import FaultConfig
from rl_assets.resources.judge import JudgeResource
from rl_assets.sandbox.launcher import SandboxTimeout
from rl_assets.sandbox.protocol import CommandResult, SandboxFault
from rl_assets.stores.verdicts import VerdictLedger
from rl_assets.tasks.task import Task
from rl_assets.workloads.seams import AttemptFork, Judge, RequestFactory, Sandbox, TaskSession


class InjectedJudgeFault(RuntimeError):
    """An injected failure after the verdict was recorded; ``cache_hit`` is how the verdict was had."""

    def __init__(self, message: str, cache_hit: bool) -> None:
        super().__init__(message)
        self.cache_hit = cache_hit


@dataclass(frozen=True)
class FaultInjection:
    """The experiment's faults for one attempt (``attempt`` is the asset's retry number)."""

    faults: FaultConfig
    attempt: int

    def judging(self, judging: JudgeResource) -> FaultyJudging:
        return FaultyJudging(judging, self)

    def sandbox(self, sandbox: Sandbox) -> FaultySandbox:
        return FaultySandbox(sandbox, self)


@dataclass(frozen=True)
class FaultyJudging:
    """:meth:`JudgeResource.judge`, failing after the verdict is recorded when the trial's flake draw says so."""

    inner: JudgeResource
    injection: FaultInjection

    def judge(
        self,
        ledger: VerdictLedger,
        trajectory: Trajectory,
        rubric: AnyRubric,
        experiment: str,
        latency_s: float,
        timeout_s: float,
        judge: Judge,
    ) -> tuple[Verdict, bool]:
        verdict, cache_hit = self.inner.judge(ledger, trajectory, rubric, experiment, latency_s, timeout_s, judge)
        if self.injection.attempt == 0 and self.injection.faults.judge_flakes(trajectory.trial_id):
            raise InjectedJudgeFault(f"injected failure after the judge answered for {trajectory.trial_id}", cache_hit)
        return verdict, cache_hit


@dataclass(frozen=True)
class FaultySandbox:
    """A :class:`~rl_assets.workloads.seams.Sandbox` whose first rollout attempt of a trial may fail or hang."""

    inner: Sandbox
    injection: FaultInjection

    def network_isolated(self) -> bool:
        return self.inner.network_isolated()

    def fork_kind(self) -> str:
        return self.inner.fork_kind()

    def rollout(self, fork: AttemptFork, make_request: RequestFactory, timeout_s: float) -> Rollout:
        first, faults = self.injection.attempt == 0, self.injection.faults
        injected = {
            "fail_below": faults.flaky_trial_rate if first else 0.0,
            "hang": first and faults.trial_hangs(fork.trial_id),
        }
        return self.inner.rollout(fork, lambda layout: make_request(layout).model_copy(update=injected), timeout_s)

    def task_session(self, fork: AttemptFork, task: Task) -> AbstractContextManager[TaskSession]:
        return self._task_session(fork, task)

    @contextmanager
    def _task_session(self, fork: AttemptFork, task: Task) -> Iterator[TaskSession]:
        """The inner session; on a trial's first attempt, a drawn flake fails it and a drawn hang stalls it.

        The flake is a sandbox that dies as the attempt starts; the hang is a first command that never
        returns, killed at the trial's timeout like any hung command, after which the attempt fails.
        """
        first, faults = self.injection.attempt == 0, self.injection.faults
        if first and faults.trial_flakes(fork.trial_id):
            raise SandboxFault(f"injected sandbox fault: the sandbox of {fork.trial_id} died as it started")
        with self.inner.task_session(fork, task) as session:
            yield HangingSession(session) if first and faults.trial_hangs(fork.trial_id) else session


@dataclass(frozen=True)
class HangingSession:
    """A task session whose first command hangs: it is killed at its timeout, and the attempt fails with it."""

    inner: TaskSession

    def run(self, command: str, timeout_s: float) -> CommandResult:
        result = self.inner.run("exec sleep infinity", timeout_s)
        raise SandboxTimeout(f"injected hang: a command ran {result.seconds:.1f}s until its timeout killed it")

    def verify(self, answer: str, deadline: float | None = None) -> VerifierOutcome:
        return self.inner.verify(answer, deadline)
