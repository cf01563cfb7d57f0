"""The machine's CPU per reference attempt in the sandbox: this checkout against an earlier commit, same run.

``python benchmarks/sandbox_cpu.py --base COMMIT [--attempts 40] [--rounds 3]``

An attempt's CPU is spent outside any one process's counters (the keeper, bubblewrap, the agent's interpreter,
the kernel's namespaces and mounts), and on a two-core machine it is what bounds how fast hundreds of trials
start. Each version runs, in a process of its own (its code exported as ``benchmarks/versus.py`` does), the
reference agent's trial on an overlay fork of a real sealed world ``--attempts`` times after one warm-up
attempt, and reports the machine's busy CPU seconds (``/proc/stat``) over those attempts; versions alternate for
``--rounds`` rounds. Printed: each version's CPU per attempt (the median round) and their ratio. Run it on an
otherwise idle machine, as root or with unprivileged user namespaces.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from versus import base_and_this, log  # noqa: E402

ATTEMPTS = """
import json, os, sys, tempfile
from pathlib import Path
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.sandbox import launcher
from rl_assets.sandbox.protocol import SandboxRequest
from rl_assets.worlds.local import LocalWorlds


def busy_s():
    fields = Path("/proc/stat").read_text().split("\\n", 1)[0].split()[1:8]
    return sum(int(v) for i, v in enumerate(fields) if i not in (3, 4)) / os.sysconf("SC_CLK_TCK")


spec = ExperimentConfig(name="bench").trials(0)[0]
with tempfile.TemporaryDirectory(prefix="sandbox-cpu-", dir="/tmp") as tmp:
    root = Path(tmp)
    root.chmod(0o755)
    worlds = LocalWorlds(root / "worlds", root / "forks")
    worlds.ensure_built(spec.world_id)
    for i in range(-1, int(sys.argv[1])):  # attempt -1 warms the zygote and the caches up
        if i == 0:
            start = busy_s()
        with worlds.fork(spec.world_id, "bench", f"a{i}", overlay=True) as fork:
            rollout = launcher.run_sandbox(SandboxRequest(spec=spec, prior=[1.0] * 8, fork=fork), timeout_s=60)
        assert len(rollout.turns) == 6, rollout
    print(json.dumps({"cpu_s": busy_s() - start, "isolation": launcher.isolation().name}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the earlier commit to compare with")
    parser.add_argument("--attempts", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbox-cpu-") as tmp:
        versions = base_and_this(args.base, Path(tmp), "sandbox_cpu.py")
        per_attempt: dict[str, list[float]] = {v.name: [] for v in versions}
        for round_ in range(args.rounds):
            for v in versions:
                out = json.loads(v.run("-c", ATTEMPTS, str(args.attempts)).stdout)
                if out["isolation"] != "bwrap":
                    raise SystemExit(f"sandbox_cpu.py: {v.name} ran without the sandbox ({out['isolation']})")
                per_attempt[v.name].append(out["cpu_s"] / args.attempts * 1000)
                log(f"round {round_}: {v.name} {per_attempt[v.name][-1]:.1f} ms of machine CPU per attempt")
    median = {name: statistics.median(values) for name, values in per_attempt.items()}
    for name, value in median.items():
        print(f"{name}: {value:.1f} ms of machine CPU per attempt (median of {args.rounds} rounds)")
    print(f"ratio this / base: {median['this'] / median['base']:.2f}x")


if __name__ == "__main__":
    main()
