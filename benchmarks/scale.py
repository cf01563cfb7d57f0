"""What a driver tick and ``status`` cost as an experiment's history grows: 10^3 to 10^6 trial runs.

``python benchmarks/scale.py --runs 1000 10000 100000 [--trials 100] [--home DIR] [--json]``

For each N, a new experiment of ``--trials`` trials a step gets a history of about N runs written in bulk into
the home's Dagster instance and ledgers (:mod:`rl_assets_testkit.history`: every step trained but the open one,
which has 10 runs in flight), then the real code paths are timed on it, each the median of ``--repeats``:

- ``tick_s``: one driver tick with nothing to wait for: the runs in flight, the plan (and its progress note),
  its run requests, its partition requests (:mod:`rl_assets.driver.sensor`);
- ``plan_s``: the plan alone;
- ``status_s``: what ``rl-assets status --json`` computes (the driver's progress note and the step table, from
  the ledgers), in this process;
- ``report_s``: what ``rl-assets report --json`` computes (the evidence from the ledgers and step summaries;
  ``--audit``, which re-reads every record, is not timed: it is the one read of the whole history by design);
  ``status_cmd_s`` and ``rss_mb`` the whole command as a person runs it (a new process: imports included),
  its wall time and peak memory;
- ``db_mb``: the home's Postgres database.

The Ns share one home, so a later N is timed beside the earlier histories too (as a long-lived home would be).
One JSON object per N is printed (``--json``: one per line), with ``tick_ratio``: its tick over the first N's.
Without ``--home`` a new home is made under /tmp and stopped and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

IN_FLIGHT = 10


def median_s(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(home: Path, runs: int, trials: int, repeats: int) -> dict[str, Any]:
    from dagster import DagsterInstance

    from rl_assets.cli.commands import _progress
    from rl_assets.domain.experiment import ExperimentConfig
    from rl_assets.domain.runtime import ExecutionSettings, Runtime
    from rl_assets.driver.planner import last_change, plan
    from rl_assets.driver.sensor import (
        ROLLOUT_JOBS,
        _experiment_plans,
        partition_requests_of,
        run_requests_of,
    )
    from rl_assets.stores.database import Database
    from rl_assets.stores.home_stores import Stores
    from rl_assets.views.report import evidence
    from rl_assets.views.results import experiment_result
    from rl_assets_testkit.history import write_history

    trained = max(1, runs // (trials + 1))
    config = ExperimentConfig(
        name=f"scale-{runs}-{uuid.uuid4().hex[:6]}", steps=trained + 2, worlds=2, prompts=trials, samples=1
    )
    stores = Stores(home, Database.from_env())
    stores.experiments.create_or_resume(config, Runtime(execution=ExecutionSettings(max_concurrent_trials=32)))
    with DagsterInstance.get() as instance:
        start = time.perf_counter()
        history = write_history(instance, stores, config, trained, in_flight=IN_FLIGHT)
        written_s = time.perf_counter() - start

        def tick() -> None:
            last_change(instance, stores)
            plans = _experiment_plans(instance, stores, config.name)  # the sensor's: notes the progress line
            run_requests_of(stores, plans, None, lambda _: None, ROLLOUT_JOBS)
            partition_requests_of(instance, plans)

        def status() -> None:
            _progress(stores, config)  # the driver's note
            experiment_result(stores, config)

        tick()  # warm: the partitions this process has seen, imports
        result = {
            "runs": history.runs,
            "tick_s": round(median_s(tick, repeats), 4),
            "plan_s": round(median_s(lambda: plan(instance, stores, config), repeats), 4),
            "status_s": round(median_s(status, repeats), 4),
            "report_s": round(median_s(lambda: evidence(stores, config), repeats), 4),
        }
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    cli = [sys.executable, "-m", "rl_assets.cli", "status", "--experiment", config.name, "--json", "--home", str(home)]
    subprocess.run(cli, check=True, capture_output=True)
    result["status_cmd_s"] = round(time.perf_counter() - start, 3)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result["rss_mb"] = round(max(peak, before) / 1024, 1)
    result["db_mb"] = round(int(stores.db.scalar("SELECT pg_database_size(current_database())")) / 2**20, 1)
    result["history_written_s"] = round(written_s, 1)
    stores.db.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--trials", type=int, default=100, help="trials a step (default 100)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--home", type=Path, help="an existing home to add the histories to (default: a new one)")
    parser.add_argument("--json", action="store_true", help="one JSON object per N")
    args = parser.parse_args(argv)
    from rl_assets.home.layout import Home
    from rl_assets.home.services.local_deployment import LocalDeployment

    root = None
    if args.home is None:
        root = Path(tempfile.mkdtemp(prefix="rl-assets-scale-", dir="/tmp"))
        root.chmod(0o755)  # the embedded Postgres runs as its own user when we are root
    home = Home(args.home or root / "home")
    deployment = LocalDeployment(home)
    try:
        deployment.up(with_ray=False)
        first_tick = None
        for runs in args.runs:
            result = measure(home.root, runs, args.trials, args.repeats)
            first_tick = first_tick or result["tick_s"]
            result["tick_ratio"] = round(result["tick_s"] / first_tick, 2)
            print(json.dumps(result) if args.json else "  ".join(f"{k}={v}" for k, v in result.items()), flush=True)
    finally:
        if root is not None:
            deployment.down()
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # Dagster on its own per-dimension tags
    raise SystemExit(main())
