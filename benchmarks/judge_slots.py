"""A rollout run's judge pool slots: this checkout's ``_JudgePool`` against an earlier commit's, in the same run.

``python benchmarks/judge_slots.py [--base ebaffa3] [--trials 256] [--limit 16] [--judge-s 0.02] [--rounds 3]
[--json]``

Each version's :class:`rl_assets.assets.rollout_batches._JudgePool` (the earlier one's source read with
``git show`` and loaded beside the installed package) judges ``--trials`` trials, each a thread that holds a slot
of the ``judge`` pool for ``--judge-s`` seconds (a judge call), under a pool limit of ``--limit``, on the
Postgres of a home of its own (started for the benchmark, stopped at its end). The versions alternate, the order
flipping each round, so drift on a shared machine hits both alike. Reported per version (medians over rounds):

- ``client_ms_per_trial``: this process's CPU (every thread), over the trials;
- ``postgres_ms_per_trial``: the CPU of the machine's ``postgres`` processes meanwhile, over the trials (run it
  with no other home busy);
- ``wall_s``: the whole batch, against the ideal ``trials / limit * judge_s``;
- ``claims``: the claims made on Dagster's slot table.

Before lanes (``ebaffa3``), every trial claimed a slot and freed it; now a slot is handed from a trial that ends to
a waiting one of the same run unless another run waits for the pool.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
MODULE = "rl_assets/assets/rollout_batches.py"


def log(message: str) -> None:
    print(f"[judge_slots] {message}", file=sys.stderr, flush=True)


def pool_class(commit: str | None) -> type:
    """``_JudgePool`` of ``commit`` (its module's source from git), or of this checkout when None.

    Of the earlier module only its imports, constants and ``_JudgePool`` are run: the rest (the op) would be
    defined against the installed package's classes, which are not its own.
    """
    if commit is None:
        from rl_assets.assets.rollout_batches import _JudgePool

        return _JudgePool
    source = subprocess.run(["git", "show", f"{commit}:{MODULE}"], cwd=REPO, capture_output=True, text=True, check=True)
    tree = ast.parse(source.stdout)
    kept = (ast.Import, ast.ImportFrom, ast.Assign)
    tree.body = [n for n in tree.body if isinstance(n, kept) or getattr(n, "name", "") in ("_JudgePool", "_QueueLog")]
    module = types.ModuleType(f"rollout_batches_{commit}")
    sys.modules[module.__name__] = module  # dataclasses look their module up while the class is built
    exec(compile(tree, f"{commit}:{MODULE}", "exec"), module.__dict__)
    return module._JudgePool


def postgres_cpu_s() -> float:
    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "postgres":
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
    return total


def judge_all(pool_type: type, storage: Any, trials: int, judge_s: float) -> dict[str, Any]:
    """Every trial through the pool at once; what it cost."""
    from rl_assets.assets.rollout_batches import _QueueLog

    claims: list[str] = []

    class Counting:
        """The storage, counting the claims that registered a new step on the slot table."""

        def __getattr__(self, name: str) -> Any:
            return getattr(storage, name)

        def claim_concurrency_slot(self, pool: str, run_id: str, step_key: str, *args: Any, **kwargs: Any) -> Any:
            claims.append(step_key)
            return storage.claim_concurrency_slot(pool, run_id, step_key, *args, **kwargs)

    pool = pool_type(Counting(), f"bench-{uuid.uuid4().hex[:8]}")
    lines: queue.Queue = queue.Queue()

    def trial(i: int) -> None:
        with pool.slot(f"bench/s0|p{i}-n0", _QueueLog(lines)):
            time.sleep(judge_s)

    threads = [threading.Thread(target=trial, args=(i,)) for i in range(trials)]
    pg0, cpu0, t0 = postgres_cpu_s(), time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if hasattr(pool, "close"):
        pool.close()
    wall, cpu, pg = time.perf_counter() - t0, time.process_time() - cpu0, postgres_cpu_s() - pg0
    left = storage.get_concurrency_info("judge").claimed_slots
    if left:
        raise RuntimeError(f"slots left claimed after the batch: {left}")
    return {
        "client_ms_per_trial": 1000 * cpu / trials,
        "postgres_ms_per_trial": 1000 * pg / trials,
        "wall_s": wall,
        "claims": len(set(claims)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="ebaffa3", help="the earlier commit (default: before lanes)")
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--limit", type=int, default=16, help="the judge pool's limit (Dagster's default pool limit)")
    parser.add_argument("--judge-s", type=float, default=0.02, help="how long each trial holds its slot")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from dagster import DagsterInstance

    from rl_assets.home.layout import Home
    from rl_assets.home.services.local_deployment import LocalDeployment

    versions = {"base": pool_class(args.base), "this": pool_class(None)}
    root = Path(tempfile.mkdtemp(prefix="rl-assets-judge-slots-", dir="/tmp"))
    root.chmod(0o755)  # the embedded Postgres runs as its own user when we are root
    deployment = LocalDeployment(Home(root / "home"))
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in versions}
    try:
        deployment.up(with_ray=False)
        with DagsterInstance.get() as instance:
            storage = instance.event_log_storage
            storage.set_concurrency_slots("judge", args.limit)
            judge_all(versions["this"], storage, args.limit, 0.0)  # warm: connections, the schema checks
            for r in range(args.rounds):
                for name in list(versions) if r % 2 == 0 else list(versions)[::-1]:
                    row = judge_all(versions[name], storage, args.trials, args.judge_s)
                    rows[name].append(row)
                    log(f"round {r} {name}: {json.dumps({k: round(v, 3) for k, v in row.items()})}")
    finally:
        deployment.down()
        shutil.rmtree(root, ignore_errors=True)
    ideal = args.trials / args.limit * args.judge_s
    summary = {
        name: {k: round(statistics.median(row[k] for row in got), 2) for k in got[0]} for name, got in rows.items()
    }
    for key in ("client_ms_per_trial", "postgres_ms_per_trial", "wall_s"):
        summary["ratio this/base " + key] = round(summary["this"][key] / summary["base"][key], 2)
    summary["ideal_s"] = round(ideal, 2)
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    sys.exit(main())
