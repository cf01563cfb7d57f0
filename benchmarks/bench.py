"""Benchmarks of rl-assets' fixed costs, each reported as a ratio against a baseline measured in the same run.

``python benchmarks/bench.py [--home DIR] [--sizes 1,100,1000] [--trials 8] [--world-trials 5] [--json]``

Absolute times on a shared or virtualised machine drift by tens of percent from run to run; a ratio against a
baseline taken minutes apart on the same machine, by the same interpreter, drifts much less. Every measurement
is therefore paired with the baseline that isolates what rl-assets itself adds:

1. **World forks** (1 MiB, 100 MiB, 1 GiB worlds of 64 random-byte files, sealed read-only like real worlds).
   The overlay fork is measured as the project does it: ``LocalWorlds.fork(..., overlay=True)`` creates the
   upper/work/merged directories, and the sandbox mounts the overlay inside ``unshare --mount``, here one
   ``[*isolation().prefix, "mount", "-t", "overlay", ...]`` subprocess. It is compared with the plain-copy fork
   (``LocalWorlds.fork(..., overlay=False)``: ``shutil.copytree`` plus making the copy writable), the fallback
   where overlays are unavailable: *copy / overlay* is the speed-up the overlay buys. The baseline
   ``[*isolation().prefix, "true"]`` is the fixed cost of starting any isolated subprocess, which the sandbox
   pays anyway, so *overlay / true* shows what mounting adds on top of it. The world's files are in the page
   cache (they were just written), which favours the copy; the overlay fork reads none of them.
2. **Per-trial orchestration**: a real ``trial_job`` run (rollout in a sandbox plus judging) with tool and judge
   latency 0, so its actual work is eight small file reads, created and executed exactly as the CLI driver does
   (``create_run`` + a worker forked from the driver's warm forkserver, waited for). The
   baseline is ``python -c pass``: the cheapest possible "trial" is one bare process, so the ratio is the price
   of durability (Dagster run storage, event log, step isolation, the sandbox) in units of a process start.
   The in-run time (RUN_START to RUN_SUCCESS, and each step's STEP_START to STEP_SUCCESS, from the instance's
   event log) separates the worker's start-up from the run itself.
3. **Train step on the warm actor**: ``ray.get(actor.apply.remote(...))`` on the experiment's detached
   ``TrainerActor`` (the call ``TrainerResource.train_step`` makes), after warm-up calls, each with a unique
   step identity so every call really applies. The baseline is ``rl_assets.domain.bandit.apply_step`` in-process
   on the same batch: the update itself, so the ratio is the cost of keeping the policy in a remote, warm,
   exactly-once actor. The same in-process work including the JSON (de)serialisation the actor does is shown
   too, and the time a new process (a ``train_job`` step) needs to import, connect and reach the existing actor.

4. **Per-trial overhead against world size**: real ``trial_job`` runs as in 2., on one world that is alternately
   1 MiB and 1 GiB (the world's documents plus 16 padding files of seeded random bytes, moved into the sealed
   tree and sealed again between trials, outside the timed part), interleaved small/big so drift hits both
   alike. The ratio *1 GiB / 1 MiB* of the median trial wall time is what a trial pays for its world's size:
   the seal check per attempt reads metadata only and the overlay fork is O(1), so it should be ~1.00 (the
   issue's bound: within 10%). For contrast, the per-attempt seal check and the audit's full re-hash of each
   world are timed in-process.

The benchmark brings the home's services up (embedded Postgres, Ray head) and leaves them running; stop them with
``rl-assets stop --home DIR``. Every file it creates for the fork benchmark is removed before it exits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rl_assets.home.layout import Home
from rl_assets.sandbox.launcher import isolation
from rl_assets.worlds.local import LocalWorlds

MIB = 1 << 20
FILES_PER_WORLD = 64


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def median_time(fn: Callable[[], Any], reps: int) -> tuple[float, list[float]]:
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), samples


def run_quiet(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}: {proc.stderr.decode().strip()}")


def ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


# ---------------------------------------------------------------------------------------------------------------
# 1. World forks


def _make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR | stat.S_IXUSR)


def remove_tree(root: Path) -> None:
    if root.exists():
        _make_writable(root)
        shutil.rmtree(root)


def build_world(root: Path, size_bytes: int) -> None:
    """``FILES_PER_WORLD`` files of seeded random bytes, then sealed read-only as a real world is."""
    gen = random.Random(size_bytes)
    per_file = size_bytes // FILES_PER_WORLD
    (root / "docs").mkdir(parents=True)
    for i in range(FILES_PER_WORLD):
        with open(root / "docs" / f"blob_{i:03d}.bin", "wb") as f:
            left = per_file
            while left:
                chunk = min(left, 16 * MIB)
                f.write(gen.randbytes(chunk))
                left -= chunk
    for path in [*root.rglob("*"), root]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def reps_for(size_mb: int) -> int:
    return 15 if size_mb <= 10 else 7 if size_mb <= 200 else 3


def bench_forks(home: Home, sizes_mb: list[int]) -> dict[str, Any]:
    iso = isolation()
    result: dict[str, Any] = {"isolation": iso.name, "overlay_available": iso.overlay, "sizes": []}
    if not iso.overlay:
        result["overlay_skipped"] = (
            f"isolation {iso.name!r} cannot mount an overlay on this machine (not root and no user namespaces "
            "with overlay support); only plain-copy forks are measured"
        )
        log(result["overlay_skipped"])
    home.root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-forks-", dir=home.root))
    worlds = LocalWorlds(scratch / "worlds", scratch / "forks")
    worlds.worlds_root.mkdir()
    worlds.forks_root.mkdir()
    try:
        true_s, _ = median_time(lambda: run_quiet([*iso.prefix, "true"]), 15)
        result["baseline_isolated_true_s"] = true_s
        for size_mb in sizes_mb:
            size = size_mb * MIB
            free = shutil.disk_usage(scratch).free
            if free < 2 * size + 512 * MIB:
                reason = f"needs {2 * size / MIB:.0f} MiB free plus margin, {free / MIB:.0f} MiB available"
                log(f"skipping {size_mb} MiB world: {reason}")
                result["sizes"].append({"size_mib": size_mb, "skipped": reason})
                continue
            world_id = f"bench{size_mb}m"
            log(f"building a {size_mb} MiB world ({FILES_PER_WORLD} files)")
            build_world(worlds.world_dir(world_id), size)
            try:
                result["sizes"].append(_bench_one_size(worlds, world_id, size_mb, true_s))
            finally:
                remove_tree(worlds.world_dir(world_id))
    finally:
        remove_tree(scratch)
    return result


def _timed_fork(worlds: LocalWorlds, world_id: str, attempt: str, overlay: bool) -> tuple[float, float]:
    """``(time until the fork is usable, time including its removal)`` for one fork."""
    prefix = isolation().prefix
    t0 = time.perf_counter()
    ctx = worlds.fork(world_id, "bench", attempt, overlay=overlay)
    layout = ctx.__enter__()
    try:
        if overlay:
            opts = f"lowerdir={layout.lower},upperdir={layout.upper},workdir={layout.work}"
            run_quiet([*prefix, "mount", "-t", "overlay", "overlay", "-o", opts, layout.merged])
        ready = time.perf_counter() - t0
    finally:
        ctx.__exit__(None, None, None)
    return ready, time.perf_counter() - t0


def _bench_one_size(worlds: LocalWorlds, world_id: str, size_mb: int, true_s: float) -> dict[str, Any]:
    reps = reps_for(size_mb)
    row: dict[str, Any] = {"size_mib": size_mb, "files": FILES_PER_WORLD, "reps": reps}
    for kind, overlay in (("overlay", True), ("copy", False)):
        if overlay and not isolation().overlay:
            row["overlay_s"] = row["overlay_with_cleanup_s"] = None
            continue
        log(f"{size_mb} MiB: {reps} {kind} forks")
        _timed_fork(worlds, world_id, f"warm-{kind}", overlay)  # warm-up, not counted
        samples = [_timed_fork(worlds, world_id, f"{kind}-{i}", overlay) for i in range(reps)]
        row[f"{kind}_s"] = statistics.median(s[0] for s in samples)
        row[f"{kind}_with_cleanup_s"] = statistics.median(s[1] for s in samples)
    row["copy_over_overlay"] = ratio(row["copy_s"], row["overlay_s"])
    row["copy_over_overlay_with_cleanup"] = ratio(row["copy_with_cleanup_s"], row["overlay_with_cleanup_s"])
    row["overlay_over_isolated_true"] = ratio(row["overlay_s"], true_s)
    return row


# ---------------------------------------------------------------------------------------------------------------
# 2. Per-trial orchestration


def _run_durations(instance: Any, run_id: str) -> dict[str, Any]:
    from dagster import DagsterEventType

    run_start = run_end = None
    steps: dict[str, dict[str, float]] = {}
    for record in instance.all_logs(run_id):
        ev = record.dagster_event
        if ev is None:
            continue
        ts = record.timestamp
        if ev.event_type == DagsterEventType.RUN_START:
            run_start = ts
        elif ev.event_type in (DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE):
            run_end = ts
        elif ev.event_type == DagsterEventType.STEP_START:
            steps.setdefault(ev.step_key, {})["start"] = ts
        elif ev.event_type == DagsterEventType.STEP_SUCCESS:
            steps.setdefault(ev.step_key, {})["end"] = ts
    return {
        "run_s": None if run_start is None or run_end is None else run_end - run_start,
        "steps_s": {k: v["end"] - v["start"] for k, v in steps.items() if "start" in v and "end" in v},
    }


def _execute_launch(instance: Any, launch: Any, home: Home) -> tuple[float, str]:
    """Create the run and launch it through the instance's launcher, as the CLI driver does; ``(wall s, run id)``."""
    from dagster import DagsterRunStatus

    from rl_assets_testkit.runs import create_run, launch_run

    t0 = time.perf_counter()
    run = create_run(instance, launch)
    launch_run(instance, run)
    finished = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
    while (status := instance.get_run_by_id(run.run_id).status) not in finished:
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    if status != DagsterRunStatus.SUCCESS:
        raise RuntimeError(f"{launch.job} {launch.partition_key} ended {status}; see {home.logs}/run-{run.run_id}.log")
    return wall, run.run_id


def ensure_partitions(instance: Any, config: Any) -> None:
    """Add the experiment's dynamic partitions, as the driver does before it launches anything."""
    from rl_assets.assets.partitions import partitions_to_add

    for name, keys in partitions_to_add(config, config.steps).items():
        missing = [k for k in keys if not instance.has_dynamic_partition(name, k)]
        if missing:
            instance.add_dynamic_partitions(name, missing)


def build_worlds(instance: Any, stores: Any, home: Home, config: Any) -> int:
    """Run the experiment's world jobs the planner asks for; how many there were."""
    from rl_assets.driver.planner import plan

    launches = [la for la in plan(instance, stores, config).launches if la.job == "world_job"]
    for launch in launches:
        log(f"world_job {launch.partition_key}")
        _execute_launch(instance, launch, home)
    return len(launches)


def bench_trials(home: Home, trials: int, experiment: str) -> dict[str, Any]:
    from dagster import DagsterInstance

    from rl_assets.domain.experiment import ExperimentConfig
    from rl_assets.domain.runtime import Runtime
    from rl_assets.driver.planner import plan
    from rl_assets.stores.database import Database
    from rl_assets.stores.home_stores import Stores

    python = sys.executable
    log("baseline: python -c pass")
    bare_s, _ = median_time(lambda: run_quiet([python, "-c", "pass"]), 20)
    log("context: python -c 'import rl_assets.definitions'")
    import_s, _ = median_time(lambda: run_quiet([python, "-c", "import rl_assets.definitions"]), 3)

    # One extra trial is the warm-up: the first run after the services came up pays for cold caches.
    config = ExperimentConfig(name=experiment, steps=1, worlds=1, prompts=trials + 1, samples=1)
    stores = Stores(home.root, Database.from_env())
    stores.experiments.create_or_resume(config, Runtime())  # latencies 0, no faults
    result: dict[str, Any] = {
        "experiment": experiment,
        "baseline_python_pass_s": bare_s,
        "python_import_definitions_s": import_s,
    }

    with DagsterInstance.get() as instance:
        ensure_partitions(instance, config)
        started = time.perf_counter()
        built = build_worlds(instance, stores, home, config)
        result["world_run_s"] = time.perf_counter() - started if built else None  # None: built before in this home
        p = plan(instance, stores, config)
        launches = [la for la in p.launches if la.job == "trial_job"]
        if len(launches) != trials + 1:
            raise RuntimeError(f"expected {trials + 1} trial launches, the planner gave {len(launches)}")
        walls, runs, step_times = [], [], {}
        for i, launch in enumerate(launches):
            log(f"trial_job {launch.partition_key} ({'warm-up' if i == 0 else f'{i}/{trials}'})")
            wall, run_id = _execute_launch(instance, launch, home)
            durations = _run_durations(instance, run_id)
            if i == 0:
                result["first_trial_s"] = wall
                continue
            walls.append(wall)
            if durations["run_s"] is not None:
                runs.append(durations["run_s"])
            for key, seconds in durations["steps_s"].items():
                step_times.setdefault(key, []).append(seconds)
    trial_s = statistics.median(walls)
    run_s = statistics.median(runs) if runs else None
    result.update(
        trials=trials,
        trial_wall_s=trial_s,
        trial_wall_min_s=min(walls),
        trial_wall_max_s=max(walls),
        trial_over_python_pass=ratio(trial_s, bare_s),
        in_run_s=run_s,
        worker_outside_run_s=None if run_s is None else trial_s - run_s,
        steps_s={k: statistics.median(v) for k, v in sorted(step_times.items())},
    )
    return result


# ---------------------------------------------------------------------------------------------------------------
# 3. Train step on the warm actor

ATTACH_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import ray
from rl_assets.resources.trainer import TrainerResource
t1 = time.perf_counter()
actor = TrainerResource(ray_address=sys.argv[1], namespace=sys.argv[2])._actor(sys.argv[3])
pid = ray.get(actor.pid.remote())
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "attach_s": t2 - t1, "pid": pid}))
"""


def _batch(n: int) -> list[Any]:
    from rl_assets.domain.models import Reward

    return [
        Reward(
            trial_id=f"s0-p{i}-n0",
            world_id="w0",
            rubric_name="v1",
            verified=i % 2 == 0,
            score=0.5,
            reward=1.0 if i % 2 == 0 else 0.0,
            found_doc=i % 8 if i % 2 == 0 else None,
            turns=1 + i % 6,
            trajectory_hash=f"{i:016x}",
            verdict_hash=f"{i + 1:016x}",
        )
        for i in range(n)
    ]


def bench_train(experiment: str, batch_size: int, calls: int, attach_reps: int) -> dict[str, Any]:
    import ray

    from rl_assets.domain.bandit import apply_step
    from rl_assets.domain.models import Policy, Reward
    from rl_assets.home.settings import RAY_ADDRESS_ENV, RAY_NAMESPACE_ENV
    from rl_assets.resources.trainer import TrainerResource

    address, namespace = os.environ[RAY_ADDRESS_ENV], os.environ[RAY_NAMESPACE_ENV]
    batch = _batch(batch_size)
    batch_json = [r.model_dump_json() for r in batch]
    policy = Policy.initial(["w0"])
    lr = 2.0

    log("baseline: apply_step in-process")
    apply_s, _ = median_time(lambda: apply_step(policy, batch, lr), 2000)

    def in_process_with_json() -> str:
        parent = Policy.model_validate_json(policy.model_dump_json())
        return apply_step(parent, [Reward.model_validate_json(r) for r in batch_json], lr).model_dump_json()

    json_s, _ = median_time(in_process_with_json, 2000)

    log("trainer actor: connect and create/attach (cold, not counted)")
    t0 = time.perf_counter()
    actor = TrainerResource(ray_address=address, namespace=namespace)._actor(experiment)
    chain = f"{experiment}/v1"
    parent_json = policy.model_dump_json()
    parent_json, pid, _ = ray.get(actor.apply.remote(chain, "bench-cold", parent_json, batch_json, lr))
    cold_s = time.perf_counter() - t0
    for i in range(5):  # warm-up
        parent_json, _, _ = ray.get(actor.apply.remote(chain, f"bench-warm-{i}", parent_json, batch_json, lr))
    log(f"trainer actor: {calls} warm apply calls")
    samples = []
    for i in range(calls):
        t = time.perf_counter()
        parent_json, _, applied = ray.get(actor.apply.remote(chain, f"bench-{i}", parent_json, batch_json, lr))
        samples.append(time.perf_counter() - t)
        if not applied:
            raise RuntimeError("the actor did not apply a step with a unique identity")
    actor_s = statistics.median(samples)

    attach: list[dict[str, Any]] = []
    for i in range(attach_reps):
        log(f"attach from a new process ({i + 1}/{attach_reps})")
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", ATTACH_CHILD, address, namespace, experiment], capture_output=True, text=True
        )
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(f"attach child failed: {proc.stderr.strip()[-2000:]}")
        child = json.loads(proc.stdout.strip().splitlines()[-1])
        if child["pid"] != pid:
            raise RuntimeError(f"the new process reached actor pid {child['pid']}, not the warm actor {pid}")
        attach.append({**child, "wall_s": wall})
    ray.kill(actor)  # the benchmark's actor only; the experiment's chain is not used elsewhere
    ray.shutdown()
    return {
        "batch_size": batch_size,
        "calls": calls,
        "actor_pid": pid,
        "baseline_apply_step_s": apply_s,
        "in_process_with_json_s": json_s,
        "actor_first_call_s": cold_s,
        "actor_call_s": actor_s,
        "actor_call_min_s": min(samples),
        "actor_call_p90_s": statistics.quantiles(samples, n=10)[-1],
        "actor_over_apply_step": ratio(actor_s, apply_s),
        "actor_over_in_process_with_json": ratio(actor_s, json_s),
        "attach_reps": attach_reps,
        "attach_import_s": statistics.median(a["import_s"] for a in attach) if attach else None,
        "attach_connect_and_call_s": statistics.median(a["attach_s"] for a in attach) if attach else None,
        "attach_process_wall_s": statistics.median(a["wall_s"] for a in attach) if attach else None,
    }


# ---------------------------------------------------------------------------------------------------------------
# 4. Per-trial overhead against world size

PAD_FILES = 16


def _write_pad(root: Path, total_bytes: int) -> None:
    """``PAD_FILES`` files of seeded random bytes under ``root``: the same entries whatever the size."""
    gen = random.Random(total_bytes)
    root.mkdir(parents=True)
    for i in range(PAD_FILES):
        with open(root / f"pad_{i:02d}.bin", "wb") as f:
            left = total_bytes // PAD_FILES
            while left:
                chunk = min(left, 16 * MIB)
                f.write(gen.randbytes(chunk))
                left -= chunk


class _SizedWorld:
    """One sealed world grown to a chosen size by moving a padding tree into it, then sealed again."""

    def __init__(self, worlds: LocalWorlds, world_id: str, pads: dict[str, Path]) -> None:
        self.worlds, self.world_id, self.pads = worlds, world_id, pads
        self.current: str | None = None

    def _move(self, src: Path, dst: Path) -> None:
        root = self.worlds.world_dir(self.world_id)
        root.chmod(root.stat().st_mode | stat.S_IWUSR)
        src.chmod(src.stat().st_mode | stat.S_IWUSR)
        os.rename(src, dst)

    def become(self, size: str | None) -> None:
        root = self.worlds.world_dir(self.world_id)
        if self.current is not None:
            self._move(root / "pad", self.pads[self.current])
        if size is not None:
            self._move(self.pads[size], root / "pad")
        self.current = size
        self.worlds.reseal(self.world_id)  # a full hash, outside the timed trial: what a world build does once


def bench_world_sizes(home: Home, trials: int, experiment: str, small_mib: int, big_mib: int) -> dict[str, Any]:
    from dagster import DagsterInstance

    from rl_assets.domain.experiment import ExperimentConfig
    from rl_assets.domain.runtime import Runtime
    from rl_assets.driver.planner import plan
    from rl_assets.resources.world_store import WorldStoreResource
    from rl_assets.stores.database import Database
    from rl_assets.stores.home_stores import Stores

    free = shutil.disk_usage(home.root).free
    if free < big_mib * MIB + small_mib * MIB + 1024 * MIB:
        return {"skipped": f"needs {big_mib + small_mib} MiB free plus 1 GiB margin, {free / MIB:.0f} MiB available"}
    sizes = {"small": small_mib, "big": big_mib}
    config = ExperimentConfig(name=f"{experiment}-sizes", steps=1, worlds=1, prompts=2 * trials + 2, samples=1)
    stores = Stores(home.root, Database.from_env())
    stores.experiments.create_or_resume(config, Runtime())
    worlds = LocalWorlds(home.worlds, home.forks)
    world_id = config.world_ids[0]
    scratch = Path(tempfile.mkdtemp(prefix="bench-pads-", dir=home.root))  # same filesystem: pads move by rename
    result: dict[str, Any] = {"experiment": config.name, "trials_per_size": trials, "sizes_mib": sizes}
    sized = _SizedWorld(worlds, world_id, {k: scratch / k for k in sizes})
    try:
        for key, mib in sizes.items():
            log(f"writing a {mib} MiB padding tree")
            _write_pad(scratch / key, mib * MIB)
        with DagsterInstance.get() as instance:
            ensure_partitions(instance, config)
            build_worlds(instance, stores, home, config)
            result["fork_kind"] = WorldStoreResource(home=str(home.root)).fork_kind()
            launches = [la for la in plan(instance, stores, config).launches if la.job == "trial_job"]
            if len(launches) != 2 * trials + 2:
                raise RuntimeError(f"expected {2 * trials + 2} trial launches, the planner gave {len(launches)}")
            walls: dict[str, list[float]] = {"small": [], "big": []}
            checks: dict[str, dict[str, float]] = {}
            for i, launch in enumerate(launches):
                size = "small" if i % 2 == 0 else "big"
                sized.become(size)
                if size not in checks:
                    checks[size] = {
                        "verified_hash_s": median_time(lambda: worlds.verified_hash(world_id), 20)[0],
                        "audited_hash_s": median_time(lambda: worlds.audited_hash(world_id), 1)[0],
                    }
                wall, _ = _execute_launch(instance, launch, home)
                warm_up = i < 2
                log(f"trial_job on the {sizes[size]} MiB world: {wall:.2f} s{' (warm-up)' if warm_up else ''}")
                if not warm_up:
                    walls[size].append(wall)
    finally:
        if sized.current is not None:
            sized.become(None)  # the world as it was built, sealed again with its recorded hash
        remove_tree(scratch)
    for size in sizes:
        result[size] = {
            "trial_wall_s": statistics.median(walls[size]),
            "trial_wall_min_s": min(walls[size]),
            "trial_wall_max_s": max(walls[size]),
            **checks[size],
        }
    result["big_over_small"] = ratio(result["big"]["trial_wall_s"], result["small"]["trial_wall_s"])
    return result


# ---------------------------------------------------------------------------------------------------------------
# Report


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x" if value < 100 else f"{value:.0f}x"


def table(rows: list[tuple[str, str, str, str]]) -> str:
    header = ("measurement", "baseline", "measured", "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    for r in rows:
        out.append("  ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))]))
    return "\n".join(out)


def report(results: dict[str, Any]) -> str:
    parts = [
        f"rl-assets benchmark, home {results['home']}, {results['machine']['cpus']} CPUs, "
        f"python {results['machine']['python']}, isolation {results['machine']['isolation']}"
    ]
    if "forks" in results:
        f = results["forks"]
        true_s = f["baseline_isolated_true_s"]
        rows: list[tuple[str, str, str, str]] = []
        for s in f["sizes"]:
            size = f"{s['size_mib']} MiB"
            if "skipped" in s:
                rows.append((f"fork {size}: skipped ({s['skipped']})", "-", "-", "-"))
                continue
            rows.append(
                (
                    f"fork {size}: copy vs overlay (until usable)",
                    fmt_s(s["overlay_s"]),
                    fmt_s(s["copy_s"]),
                    fmt_x(s["copy_over_overlay"]),
                )
            )
            rows.append(
                (
                    f"fork {size}: copy vs overlay (incl. removal)",
                    fmt_s(s["overlay_with_cleanup_s"]),
                    fmt_s(s["copy_with_cleanup_s"]),
                    fmt_x(s["copy_over_overlay_with_cleanup"]),
                )
            )
            rows.append(
                (
                    f"fork {size}: overlay vs isolated `true`",
                    fmt_s(true_s),
                    fmt_s(s["overlay_s"]),
                    fmt_x(s["overlay_over_isolated_true"]),
                )
            )
        parts += ["", "1. World forks (median; baseline of the first two rows: the overlay fork)", table(rows)]
        if f.get("overlay_skipped"):
            parts.append(f"overlay not measured: {f['overlay_skipped']}")
    if "trial" in results:
        t = results["trial"]
        bare = t["baseline_python_pass_s"]
        rows = [
            (
                f"trial_job run end-to-end (median of {t['trials']})",
                fmt_s(bare),
                fmt_s(t["trial_wall_s"]),
                fmt_x(t["trial_over_python_pass"]),
            ),
            (
                "  of which inside the run (RUN_START->RUN_SUCCESS)",
                fmt_s(bare),
                fmt_s(t["in_run_s"]),
                fmt_x(ratio(t["in_run_s"], bare)),
            ),
            (
                "  of which worker start-up, run creation, teardown",
                fmt_s(bare),
                fmt_s(t["worker_outside_run_s"]),
                fmt_x(ratio(t["worker_outside_run_s"], bare)),
            ),
        ]
        rows += [
            (f"  step {k} (STEP_START->STEP_SUCCESS)", fmt_s(bare), fmt_s(v), fmt_x(ratio(v, bare)))
            for k, v in t["steps_s"].items()
        ]
        rows += [
            (
                "first trial run (warm-up, not in the median)",
                fmt_s(bare),
                fmt_s(t["first_trial_s"]),
                fmt_x(ratio(t["first_trial_s"], bare)),
            ),
            ("world_job run end-to-end", fmt_s(bare), fmt_s(t["world_run_s"]), fmt_x(ratio(t["world_run_s"], bare))),
            (
                "context: python -c 'import rl_assets.definitions'",
                fmt_s(bare),
                fmt_s(t["python_import_definitions_s"]),
                fmt_x(ratio(t["python_import_definitions_s"], bare)),
            ),
        ]
        parts += [
            "",
            f"2. Per-trial orchestration (baseline: python -c pass; trial work = 8 file reads; "
            f"min {fmt_s(t['trial_wall_min_s'])}, max {fmt_s(t['trial_wall_max_s'])})",
            table(rows),
        ]
    if "train" in results:
        r = results["train"]
        base = r["baseline_apply_step_s"]
        rows = [
            (
                f"warm actor.apply round trip (median of {r['calls']})",
                fmt_s(base),
                fmt_s(r["actor_call_s"]),
                fmt_x(r["actor_over_apply_step"]),
            ),
            ("  p90 / min", "", f"{fmt_s(r['actor_call_p90_s'])} / {fmt_s(r['actor_call_min_s'])}", ""),
            (
                "in-process apply incl. JSON (de)serialisation",
                fmt_s(base),
                fmt_s(r["in_process_with_json_s"]),
                fmt_x(ratio(r["in_process_with_json_s"], base)),
            ),
            (
                "warm actor.apply vs in-process incl. JSON",
                fmt_s(r["in_process_with_json_s"]),
                fmt_s(r["actor_call_s"]),
                fmt_x(r["actor_over_in_process_with_json"]),
            ),
            (
                "first call in this process (connect + get-or-create actor)",
                "",
                fmt_s(r["actor_first_call_s"]),
                "",
            ),
            (f"new process: import ray + trainer (median of {r['attach_reps']})", "", fmt_s(r["attach_import_s"]), ""),
            (
                "new process: connect + attach + first call",
                fmt_s(r["actor_call_s"]),
                fmt_s(r["attach_connect_and_call_s"]),
                fmt_x(ratio(r["attach_connect_and_call_s"], r["actor_call_s"])),
            ),
            ("new process: whole process wall time", "", fmt_s(r["attach_process_wall_s"]), ""),
        ]
        parts += [
            "",
            f"3. Train step (batch of {r['batch_size']} rewards; baseline: apply_step in-process)",
            table(rows),
        ]
    if "world_sizes" in results:
        w = results["world_sizes"]
        if "skipped" in w:
            parts += ["", f"4. Per-trial overhead against world size: skipped ({w['skipped']})"]
        else:
            small, big = w["small"], w["big"]
            mib = w["sizes_mib"]
            rows = [
                (
                    f"trial_job run, {mib['big']} MiB vs {mib['small']} MiB world (median of {w['trials_per_size']})",
                    fmt_s(small["trial_wall_s"]),
                    fmt_s(big["trial_wall_s"]),
                    fmt_x(w["big_over_small"]),
                ),
                (
                    "  min / max, small world",
                    "",
                    f"{fmt_s(small['trial_wall_min_s'])} / {fmt_s(small['trial_wall_max_s'])}",
                    "",
                ),
                (
                    "  min / max, big world",
                    "",
                    f"{fmt_s(big['trial_wall_min_s'])} / {fmt_s(big['trial_wall_max_s'])}",
                    "",
                ),
                (
                    "per-attempt seal check (verified_hash), big vs small",
                    fmt_s(small["verified_hash_s"]),
                    fmt_s(big["verified_hash_s"]),
                    fmt_x(ratio(big["verified_hash_s"], small["verified_hash_s"])),
                ),
                (
                    "audit's full re-hash (audited_hash), big vs small",
                    fmt_s(small["audited_hash_s"]),
                    fmt_s(big["audited_hash_s"]),
                    fmt_x(ratio(big["audited_hash_s"], small["audited_hash_s"])),
                ),
            ]
            parts += [
                "",
                f"4. Per-trial overhead against world size (baseline: the {mib['small']} MiB world; "
                f"forks: {w['fork_kind']}; interleaved small/big)",
                table(rows),
            ]
    parts += ["", f"total benchmark time {fmt_s(results['total_s'])}"]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="home directory (default: $RL_ASSETS_HOME or ./.rl-assets)")
    parser.add_argument("--sizes", default="1,100,1000", help="world sizes in MiB, comma-separated")
    parser.add_argument("--trials", type=int, default=8, help="trial runs in the median (plus one warm-up)")
    parser.add_argument("--train-calls", type=int, default=50, help="warm actor calls in the median")
    parser.add_argument("--batch", type=int, default=8, help="rewards per training batch")
    parser.add_argument("--attach-reps", type=int, default=2, help="new processes attaching to the actor")
    parser.add_argument("--world-trials", type=int, default=5, help="trial runs per world size (plus a warm-up)")
    parser.add_argument("--world-sizes", default="1,1024", help="small,big world sizes in MiB for part 4")
    parser.add_argument("--parts", default="forks,trial,train,world_sizes", help="which measurements to run")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"forks", "trial", "train", "world_sizes"}
    if unknown:
        parser.error(f"--parts: unknown {sorted(unknown)}")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    started = time.perf_counter()
    home = Home.resolve(args.home)
    results: dict[str, Any] = {
        "home": str(home.root),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "isolation": isolation().name},
    }
    if "forks" in parts:
        results["forks"] = bench_forks(home, sizes)
    if parts & {"trial", "train", "world_sizes"}:
        from rl_assets.home.services.local_deployment import LocalDeployment

        log(f"bringing the services of {home.root} up")
        t = time.perf_counter()
        LocalDeployment(home).up()
        results["services_up_s"] = time.perf_counter() - t
        experiment = f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
        if "trial" in parts:
            results["trial"] = bench_trials(home, args.trials, experiment)
        if "train" in parts:
            results["train"] = bench_train(experiment, args.batch, args.train_calls, args.attach_reps)
        if "world_sizes" in parts:
            small_mib, big_mib = (int(x) for x in args.world_sizes.split(","))
            results["world_sizes"] = bench_world_sizes(home, args.world_trials, experiment, small_mib, big_mib)
    results["total_s"] = time.perf_counter() - started
    print(json.dumps(results) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
