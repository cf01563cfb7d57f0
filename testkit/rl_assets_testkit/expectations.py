"""What a run must give, from the spec oracle, and how the tests and benchmarks run the CLI as a user would.

The boundary to the oracle is here: an experiment's numbers go in, nothing of the package's logic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets_testkit import oracle


def run_cli(
    home: Path, *args: str, check: bool = True, timeout: float = 900, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``rl-assets`` as a user would: a separate process, with ``--home``; ``env`` adds to its environment."""
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env} if env is not None else None,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"rl-assets {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def train_json(home: Path, *args: str) -> dict:
    return json.loads(run_cli(home, "train", *args, "--json").stdout)


def cli_args(name: str, fields: dict) -> list[str]:
    """``train`` arguments for an experiment config given as fields."""
    args = ["--experiment", name]
    for key, value in fields.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


Expectation = tuple[list, dict]
"""``(table, weights)`` shaped as in ``train --json``: ``table_of(result)`` and ``result["weights"]``."""


def _spec_config(config: ExperimentConfig) -> oracle.Config:
    """The boundary to the spec oracle: the experiment's numbers, nothing of the package's logic."""
    return oracle.Config(
        steps=config.steps,
        worlds=config.worlds,
        prompts=config.prompts,
        samples=config.samples,
        lr=config.lr,
        max_turns=config.max_turns,
        failed_trial_policy=config.failed_trial_policy,
    )


def _spec_rubric(name: str, weights: tuple[float, float, float] | None) -> oracle.Rubric:
    """A built-in rubric by name (weights from the spec), or ``name`` with (correctness, efficiency, tidiness)."""
    return oracle.BUILTIN_RUBRICS[name] if weights is None else oracle.Rubric(name, *weights)


def oracle_expectation(
    config: ExperimentConfig,
    failed: frozenset[str] = frozenset(),
    rubric_weights: tuple[float, float, float] | None = None,
) -> Expectation:
    """What ``train`` of ``config`` must give, from the spec oracle (``rl_assets_testkit.oracle``).

    ``failed``: trial ids that failed for good. ``rubric_weights``: (correctness, efficiency, tidiness) of
    ``config.rubric`` when it is not a built-in.
    """
    run = oracle.train(_spec_config(config), _spec_rubric(config.rubric, rubric_weights), failed)
    return run.table(), run.weights()


def rescored_expectation(
    config: ExperimentConfig, rubric: str, rubric_weights: tuple[float, float, float] | None = None
) -> Expectation:
    """What ``rescore --rubric RUBRIC`` of a trained ``config`` must give: its trajectories re-judged, retrained."""
    trained = oracle.train(_spec_config(config), _spec_rubric(config.rubric, None))
    run = oracle.rescore(trained, _spec_rubric(rubric, rubric_weights))
    return run.table(), run.weights()


def forked_expectation(
    parent: ExperimentConfig, rubric: str, rubric_weights: tuple[float, float, float] | None = None
) -> Expectation:
    """What ``fork --from PARENT --rubric RUBRIC`` must give: unchanged rollouts reused, the rest regenerated."""
    trained = oracle.train(_spec_config(parent), _spec_rubric(parent.rubric, None))
    run = oracle.fork(trained, _spec_rubric(rubric, rubric_weights))
    return run.table(), run.weights()


def table_of(result: dict) -> list:
    return [(s["mean_reward"], s["mean_turns"], s["trials_ok"]) for s in result["steps"]]
