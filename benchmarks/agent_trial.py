"""An agent trial's orchestration overhead against the reference trial's, measured in the same run.

``python benchmarks/agent_trial.py [--home DIR] [--trials 6] [--json]``

Both are real ``trial_job`` runs executed as the CLI driver does (``bench.py``'s part 2): a reference
trial (the bandit agent in its sandbox, eight file reads, the simulated judge) and a task trial of
``examples/tasks/create-file`` (the chat agent in the worker against the stand-in model server: two
answered calls over real HTTP, one ``write_file`` command in the task sandbox, then ``tests/test.sh``
in the same fork, rewarded by the verifier alone). Runs alternate, reference then agent, after one
warm-up of each, so drift hits both alike. The ratio *agent / reference* of the median wall time is
what a tool-using trial costs beyond the reference's, with a model that answers at once: what is left
is the task sandbox's start, its commands, the verifier, and the HTTP calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import _execute_launch, build_worlds, ensure_partitions, fmt_s, fmt_x, log, ratio

from rl_assets.home.layout import Home

TASK = Path(__file__).resolve().parents[1] / "examples" / "tasks" / "create-file"


def _trial_launches(instance: Any, stores: Any, home: Home, config: Any) -> list[Any]:
    """Build the experiment's world (one run), then its trial launches, in order."""
    from rl_assets.driver.planner import plan

    ensure_partitions(instance, config)
    build_worlds(instance, stores, home, config)
    return [la for la in plan(instance, stores, config).launches if la.job == "trial_job"]


def bench(home: Home, trials: int) -> dict[str, Any]:
    from dagster import DagsterInstance

    from rl_assets.domain.experiment import ExperimentConfig
    from rl_assets.domain.runtime import Runtime
    from rl_assets.stores.database import Database
    from rl_assets.stores.home_stores import Stores
    from rl_assets.tasks.snapshot import with_recorded_task_set
    from rl_assets_testkit.example_solutions import POLICY_MODEL, script
    from rl_assets_testkit.served_model import ServedModel

    stamp = time.strftime("%Y%m%d-%H%M%S")
    stores = Stores(home.root, Database.from_env())
    reference = ExperimentConfig(name=f"ref-{stamp}", steps=1, worlds=1, prompts=trials + 1, samples=1)
    stores.experiments.create_or_resume(reference, Runtime())
    with tempfile.TemporaryDirectory() as scratch, ServedModel(script(), Path(scratch)) as server:
        agent = with_recorded_task_set(
            ExperimentConfig(
                name=f"agent-{stamp}",
                steps=1,
                samples=trials + 1,
                tasks=str(TASK),
                policy_url=server.base_url,
                policy_model=POLICY_MODEL,
            ),
            home.tasks,
        )
        stores.experiments.create_or_resume(agent, Runtime())
        walls: dict[str, list[float]] = {"reference": [], "agent": []}
        with DagsterInstance.get() as instance:
            pairs = zip(
                _trial_launches(instance, stores, home, reference),
                _trial_launches(instance, stores, home, agent),
                strict=True,
            )
            for i, (ref_launch, agent_launch) in enumerate(pairs):
                for kind, launch in (("reference", ref_launch), ("agent", agent_launch)):
                    log(f"{kind} {launch.partition_key} ({'warm-up' if i == 0 else f'{i}/{trials}'})")
                    wall, _ = _execute_launch(instance, launch, home)
                    if i:
                        walls[kind].append(wall)
        answered = server.stats()["answered"].get(POLICY_MODEL, 0)
    ref_s, agent_s = statistics.median(walls["reference"]), statistics.median(walls["agent"])
    return {
        "trials": trials,
        "reference_trial_s": ref_s,
        "agent_trial_s": agent_s,
        "agent_over_reference": ratio(agent_s, ref_s),
        "agent_minus_reference_s": agent_s - ref_s,
        "policy_calls_answered": answered,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="home directory (default: $RL_ASSETS_HOME or ./.rl-assets)")
    parser.add_argument("--trials", type=int, default=6, help="trials of each kind in the median (plus a warm-up)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)
    from rl_assets.home.services.local_deployment import LocalDeployment

    home = Home.resolve(args.home)
    log(f"bringing the services of {home.root} up")
    LocalDeployment(home).up()
    result = bench(home, args.trials)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"per-trial wall time, median of {result['trials']}: reference {fmt_s(result['reference_trial_s'])}, "
            f"agent {fmt_s(result['agent_trial_s'])}, agent / reference {fmt_x(result['agent_over_reference'])} "
            f"({result['policy_calls_answered']} policy calls answered)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
