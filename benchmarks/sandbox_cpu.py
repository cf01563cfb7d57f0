"""The machine's CPU per reference attempt in the sandbox, with the runtime as bound now and with more binds.

Each bind in the sandbox's runtime is a mount that bubblewrap remounts read-only after reading the whole
mount table again, so an attempt's CPU grows with the binds. This runs the reference agent's trial on an
overlay fork of a real sealed world N times in each of two configurations, alternating, in one process:

- **now**: :func:`rl_assets.sandbox.launcher.run_sandbox` as trials use it;
- **with tkinter's libraries**: the same with the libraries only ``_tkinter`` links bound too (what the
  runtime bound before ``RUNTIME_FORMAT`` 2);

and reports the machine's CPU seconds per attempt (``/proc/stat``: the keeper, bubblewrap, the agent and
the kernel's work for them, which no per-process counter sees whole) and their ratio. Run it on an
otherwise idle machine, as root or with unprivileged user namespaces::

    .venv/bin/python benchmarks/sandbox_cpu.py --attempts 60
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.sandbox import launcher
from rl_assets.sandbox.protocol import SandboxRequest
from rl_assets.worlds.local import LocalWorlds


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine (every state but idle and iowait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]
    return sum(int(v) for i, v in enumerate(fields) if i not in (3, 4)) / os.sysconf("SC_CLK_TCK")


def tk_only_libraries() -> list[str]:
    """The shared libraries only ``_tkinter`` links, as this interpreter's ``ldd`` finds them."""
    dynload = list((Path(os.__file__).parent / "lib-dynload").glob("*.so"))

    def linked(paths: list[Path]) -> set[str]:
        out = subprocess.run(["ldd", *map(str, paths)], capture_output=True, text=True).stdout
        return {os.path.realpath(line.split("=>")[1].split()[0]) for line in out.splitlines() if "=> /" in line}

    tk = [p for p in dynload if p.name.startswith("_tkinter")]
    others = [Path(os.path.realpath(sys.executable)), *(p for p in dynload if p not in tk)]
    return sorted(linked(tk) - linked(others)) if tk else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=60)
    args = parser.parse_args()
    spec = ExperimentConfig(name="bench").trials(0)[0]
    now = launcher._runtime(sys.executable)
    extra = tk_only_libraries()
    more = (tuple(now[0]) + tuple((lib, lib) for lib in extra), now[1], now[2])
    runtimes = {"now": now, "with tkinter's libraries": more}
    cpu = dict.fromkeys(runtimes, 0.0)
    with tempfile.TemporaryDirectory(prefix="sandbox-cpu-", dir="/tmp") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        worlds = LocalWorlds(root / "worlds", root / "forks")
        worlds.ensure_built(spec.world_id)
        for i in range(-1, args.attempts):  # attempt -1 warms the zygote and the caches up
            for name, runtime in runtimes.items():
                launcher._runtime = lambda interpreter, runtime=runtime: runtime
                before = machine_cpu_s()
                with worlds.fork(spec.world_id, "bench", f"{name[:3]}{i}", overlay=True) as fork:
                    launcher.run_sandbox(SandboxRequest(spec=spec, prior=[1.0] * 8, fork=fork), timeout_s=60)
                if i >= 0:
                    cpu[name] += machine_cpu_s() - before
    print(f"binds now: {len(now[0])}; tkinter's libraries: {len(extra)}")
    for name, total in cpu.items():
        print(f"{name}: {total / args.attempts * 1000:.1f} ms of machine CPU per attempt")
    print(f"ratio now / with tkinter's libraries: {cpu['now'] / cpu[list(cpu)[1]]:.2f}x")


if __name__ == "__main__":
    main()
