"""Workloads: named bundles of an agent, a judge and a trainer, chosen by ``ExperimentConfig.workload``.

The environment is not part of the bundle: it is chosen by the deployment
(local sandbox or Kubernetes, see :mod:`rl_assets.driver.deployment`), and every
workload runs on either. A workload is looked up by name in each process that
needs it (step workers, the trainer actor), so a workload must be registered
at import time of a module every such process imports; the reference workload
is registered here.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_assets.domain.experiment import TASKS_WORKLOAD, ExperimentConfig
from rl_assets.workloads.harbor.workload import TaskAgent, VerifierOnlyJudge
from rl_assets.workloads.reference import BanditTrainer, ReferenceAgent, SimulatedJudge
from rl_assets.workloads.seams import Agent, Judge, Trainer
from rl_assets.workloads.task_trainer import TaskTrainer


@dataclass(frozen=True)
class Workload:
    """What an experiment runs: its agent, its judge and its trainer, under one name."""

    name: str
    agent: Agent
    judge: Judge
    trainer: Trainer


class UnknownWorkloadError(KeyError):
    """An experiment names a workload no module registered."""

    def __str__(self) -> str:
        return f"no workload named {self.args[0]!r} (registered: {', '.join(sorted(_REGISTRY))})"


REFERENCE = Workload(name="reference", agent=ReferenceAgent(), judge=SimulatedJudge(), trainer=BanditTrainer())
"""The built-in workload: the bandit of docs/reference-workload.md, the default of every experiment."""

TASKS = Workload(name=TASKS_WORKLOAD, agent=TaskAgent(), judge=VerifierOnlyJudge(), trainer=TaskTrainer())
"""Harbor task sets (``--tasks``): the chat agent against the experiment's policy server, the task's verifier;
``--trainer none`` keeps the policy, ``--trainer grpo`` trains a causal LM."""

_REGISTRY: dict[str, Workload] = {REFERENCE.name: REFERENCE, TASKS.name: TASKS}


def register(workload: Workload) -> None:
    """Make ``workload`` selectable by its name; a name is registered once (an experiment's results depend on it)."""
    existing = _REGISTRY.get(workload.name)
    if existing is not None and existing != workload:
        raise ValueError(f"a different workload is already registered as {workload.name!r}")
    _REGISTRY[workload.name] = workload


def workload(name: str) -> Workload:
    """The workload registered as ``name``, else :class:`UnknownWorkloadError`."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownWorkloadError(name) from None


def workload_of(config: ExperimentConfig) -> Workload:
    """The workload an experiment runs."""
    return workload(config.workload)
