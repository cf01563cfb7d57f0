"""rl-assets: durable agentic reinforcement learning as a Dagster asset graph.

What users import, by name, from the package root (``from rl_assets import ExperimentConfig``). Each
name is loaded on first use, so ``import rl_assets`` itself costs nothing and needs nothing beyond the
standard library: the CLI's quick refusals and the sandbox (which sees this file) rely on that.
"""

from __future__ import annotations

_EXPORTS: dict[str, str] = {
    # The code location.
    "defs": "rl_assets.definitions",
    # The schema of an experiment: what it computes, and how it is executed.
    "ExperimentConfig": "rl_assets.domain.experiment",
    "Runtime": "rl_assets.domain.runtime",
    "FaultConfig": "rl_assets.domain.runtime",
    "ExecutionSettings": "rl_assets.domain.runtime",
    # The records that cross process and storage boundaries.
    "Rubric": "rl_assets.domain.models",
    "Policy": "rl_assets.domain.models",
    "TrialSpec": "rl_assets.domain.models",
    "Trajectory": "rl_assets.domain.models",
    "Verdict": "rl_assets.domain.models",
    "Reward": "rl_assets.domain.models",
    # The seams a workload plugs into, and the bundle that names one (register it with
    # rl_assets.workloads.registry.register, select it with --workload).
    "Environment": "rl_assets.workloads.seams",
    "WorldStore": "rl_assets.workloads.seams",
    "Sandbox": "rl_assets.workloads.seams",
    "AttemptFork": "rl_assets.workloads.seams",
    "Agent": "rl_assets.workloads.seams",
    "Judge": "rl_assets.workloads.seams",
    "Trainer": "rl_assets.workloads.seams",
    "Workload": "rl_assets.workloads.registry",
    # The Dagster resources, to configure or replace in a deployment's Definitions.
    "StoresResource": "rl_assets.resources.stores",
    "WorldStoreResource": "rl_assets.resources.world_store",
    "K8sWorldStoreResource": "rl_assets.resources.k8s_world_store",
    "JudgeResource": "rl_assets.resources.judge",
    "TrainerResource": "rl_assets.resources.trainer",
    # A home: its directory layout and services.
    "Home": "rl_assets.home.layout",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    import importlib  # here: the sandboxed reference agent imports this file on every attempt

    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rl_assets' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
