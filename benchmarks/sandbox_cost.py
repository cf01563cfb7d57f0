"""Cost of one rollout in the sandbox, against the sandbox it replaced, measured in the same run.

Both run the reference agent's trial on an overlay fork of a real sealed world, alternately, N times:

- **previous**: the code as it was before the bubblewrap sandbox (exported from git: the parent of the
  commit that added ``rl_assets/sandbox/keeper.py``), i.e. ``unshare --mount --net --pid`` as root and a
  runner that mounts the overlay, makes every other mount read-only and prints its rollout;
- **bubblewrap**: :func:`rl_assets.sandbox.launcher.run_sandbox` as trials use it now (keeper, overlay on a
  quota tmpfs, bwrap with user namespace, seccomp, cgroups where writable, tool calls over pipes);
- ``python -c pass`` as the unit: the cost of starting one interpreter on this machine.

Run as root from a checkout (it needs git for the previous code)::

    .venv/bin/python benchmarks/sandbox_cost.py --trials 20
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.sandbox.launcher import run_sandbox
from rl_assets.sandbox.protocol import SandboxRequest
from rl_assets.worlds.local import LocalWorlds

REPO = Path(__file__).resolve().parents[1]
PREVIOUS_PREFIX = ["unshare", "--mount", "--net", "--pid", "--mount-proc", "--fork", "--kill-child"]


def previous_commit() -> str:
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "rl_assets/sandbox/keeper.py"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not added:
        raise SystemExit("sandbox_cost.py: no commit adds rl_assets/sandbox/keeper.py in this checkout's history")
    return f"{added[-1]}^"


def export_previous(commit: str, into: Path) -> None:
    archive = subprocess.run(["git", "archive", commit, "rl_assets"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def run_previous(code: Path, request: dict) -> None:
    proc = subprocess.run(
        [*PREVIOUS_PREFIX, sys.executable, "-m", "rl_assets.sandbox.runner"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{code}:{':'.join(p for p in sys.path if p)}"},
        cwd="/",
    )
    if "RL_ASSETS_ROLLOUT " not in proc.stdout:
        raise SystemExit(f"the previous sandbox failed: {proc.stderr[-500:]}")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    spec = ExperimentConfig(name="bench").trials(0)[0]
    with tempfile.TemporaryDirectory(prefix="sandbox-cost-", dir="/tmp") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        (root / "previous").mkdir()
        commit = previous_commit()
        export_previous(commit, root / "previous")
        worlds = LocalWorlds(root / "worlds", root / "forks")
        worlds.ensure_built(spec.world_id)
        times: dict[str, list[float]] = {"python -c pass": [], "previous": [], "bubblewrap": []}
        for i in range(args.trials + 1):  # the first round warms caches and is dropped
            sample = {"python -c pass": timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))}
            with worlds.fork(spec.world_id, "prev", f"a{i}", overlay=True) as fork:
                request = {"spec": spec.model_dump(), "prior": [1.0] * 8, "fork": fork.model_dump()}
                request["confine_writes"] = True
                sample["previous"] = timed(functools.partial(run_previous, root / "previous", request))
            with worlds.fork(spec.world_id, "new", f"a{i}", overlay=True) as fork:
                req = SandboxRequest(spec=spec, prior=[1.0] * 8, fork=fork)
                sample["bubblewrap"] = timed(functools.partial(run_sandbox, req, timeout_s=60))
            if i:
                for name, seconds in sample.items():
                    times[name].append(seconds)
    unit = statistics.median(times["python -c pass"])
    previous = statistics.median(times["previous"])
    short = subprocess.run(["git", "rev-parse", "--short", commit], cwd=REPO, capture_output=True, text=True)
    print(f"previous sandbox: {commit} = {short.stdout.strip()}; {args.trials} trials each, alternating")
    print(f"{'sandbox':<16} {'median':>9} {'mean':>9} {'x python -c pass':>17} {'x previous':>11}")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name:<16} {median * 1000:>7.1f}ms {statistics.mean(values) * 1000:>7.1f}ms "
            f"{median / unit:>16.1f}x {median / previous:>10.2f}x"
        )


if __name__ == "__main__":
    main()
