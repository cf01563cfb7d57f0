"""Latency-bound trials at concurrency equal to their count: this checkout against an earlier commit, same run.

``python benchmarks/latency_bound.py --base COMMIT [--trials 64 256 1024] [--latency 2] [--workloads reference tasks]
[--base-up-to 256] [--repeat 1] [--json]``

Every trial waits: the reference workload's on ``--tool-latency`` per document read, the task workload's on the
stand-in model server, which answers every call after ``--latency`` seconds (its ``answer_delay_s``). For each
trial count N, each version trains one step of N trials with ``--max-concurrent-trials N`` on its own warm home
(worlds built, services up, a small step just trained), versions alternating, the other version's home stopped
meanwhile, and reports:

- ``wall_s``: the ``train`` command; ``rollout_s``: from the step's first rollout attempt to its last trial's
  judgment (the ledgers' timestamps);
- ``ideal_s``: the slowest trial's waiting alone (its turns or model calls times the latency), and
  ``x_ideal``: ``rollout_s / ideal_s``;
- ``pss_mb_per_trial``: the peak proportional set size of the home's processes during the ``train`` command
  (daemon, code server, run workers and sandboxes; Postgres and Ray excluded), less theirs before it, over N;
- ``cpu_s_per_trial``: the machine's CPU seconds during the ``train`` command, over N;
- ``train_cpu_s``: the ``train`` command's own CPU seconds (it follows the step: it plans while it waits);
- ``failed_trials``: trials that failed for good (at 1024 task trials on two cores, many pass their deadline).

A ``train`` that exits non-zero is a row too, with ``failed``: its last line.

``--repeat K`` measures each N K times per version (``round`` in the rows), the base first in even rounds and this
checkout first in odd ones: same-run pairs at 256 reference trials differed by more than the changes measured,
and the version measured second was behind more often than not.

``--base-up-to`` skips the earlier commit above that N (it runs a Dagster run per trial, 16 at a time: 1024
trials take it many minutes). The earlier code is exported with ``benchmarks/versus.py``'s helpers; both homes
are stopped and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from versus import REPO, Version, base_and_this, log  # noqa: E402

SERVICES = ("postgres", "raylet", "gcs_server", "ray::", "ray/", "dashboard", "log_monitor", "monitor.py")

LEDGER_QUERY = """
import json, sys
from pathlib import Path
from rl_assets.home.layout import Home
from rl_assets.home.services.local_deployment import LocalDeployment
from rl_assets.stores.database import Database
from rl_assets.stores.home_stores import Stores
home, experiment, kind = Home(Path(sys.argv[1])), sys.argv[2], sys.argv[4]
latency = float(sys.argv[3])
LocalDeployment(home).up(with_ray=False)
stores = Stores(home.root, Database.from_env())
with stores.db.transaction() as cur:
    cur.execute("SELECT extract(epoch FROM min(started_at)) FROM rl_generation_attempts WHERE experiment = %s",
                (experiment,))
    first = cur.fetchone()[0]
    cur.execute("SELECT extract(epoch FROM greatest((SELECT max(started_at) FROM rl_judge_attempts WHERE "
                "experiment = %s), (SELECT max(finished_at) FROM rl_generation_attempts WHERE experiment = %s)))",
                (experiment, experiment))
    last = cur.fetchone()[0]
config = stores.experiments.get(experiment)
waits = []
for spec in config.trials(0):
    t = stores.trials.trajectory(experiment, 0, spec.trial_id.split("-", 1)[1])
    if t is not None:  # a trial that failed for good before its rollout was recorded has none
        waits.append(t.transcript.policy_calls if kind == "tasks" else len(t.turns))
failed = len(stores.attempts.failed_trials(experiment, [0]))
print(json.dumps({"trials": len(config.trials(0)), "failed_trials": failed, "rollout_s": float(last) - float(first),
                  "ideal_s": max(waits) * latency}))
"""


def home_pss_mb(home: Path) -> float:
    """PSS of the processes working for ``home`` (its environment names it), its Postgres and Ray excluded."""
    total = 0
    wanted = f"RL_ASSETS_HOME={home}"
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if any(s in cmd for s in SERVICES):
                continue
            if wanted not in "\0".join(f"{k}={v}" for k, v in proc.environ().items()):
                continue
            total += proc.memory_full_info().pss
        except (psutil.Error, OSError):
            continue
    return total / 2**20


def machine_cpu_s() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / 100.0


def children_cpu_s() -> float:
    """The CPU seconds of this process's ended children (the ``train`` commands it ran)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class PeakPss:
    """Samples the home's PSS every ``every_s`` in a thread; ``peak`` once stopped."""

    def __init__(self, home: Path, every_s: float = 2.0) -> None:
        self.home, self.every_s, self.peak = home, every_s, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # Reading a thousand processes' memory maps is work of its own: at the lowest priority, the sampler takes
        # only CPU the trials leave idle, so it cannot slow what it measures (the peak is while they all wait).
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, home_pss_mb(self.home))

    def __enter__(self) -> PeakPss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def stand_in_server(root: Path, latency: float) -> tuple[subprocess.Popen, str]:
    """The stand-in model server with the example tasks' answers, each after ``latency`` seconds."""
    script = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rl_assets_testkit.example_solutions"], capture_output=True, text=True, check=True
        ).stdout
    )
    script["answer_delay_s"] = latency
    path = root / "stand-in.json"
    path.write_text(json.dumps(script))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rl_assets_testkit.model_server", "--port", "0", "--script", str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    return proc, f"http://127.0.0.1:{port}/v1"


def train_args(workload: str, n: int, latency: float, experiment: str, policy_url: str) -> list[str]:
    common = ["train", "--experiment", experiment, "--steps", "1", "--max-concurrent-trials", str(n), "--json"]
    if workload == "reference":
        return [*common, "--worlds", "4", "--prompts", str(n // 4), "--samples", "4", "--tool-latency", str(latency)]
    tasks = REPO / "examples" / "tasks"
    count = len([p for p in tasks.iterdir() if (p / "task.toml").exists()])
    return [
        *common,
        "--tasks",
        str(tasks),
        "--samples",
        str(n // count),
        "--policy-url",
        policy_url,
        "--policy-model",
        "policy",
    ]


def stop(v: Version) -> None:
    subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", "stop", "--home", str(v.home)], env=v.env(), capture_output=True
    )


def alone_and_warm(v: Version, versions: list[Version], experiment: str) -> None:
    """Only ``v``'s home up, warm: an idle home's daemon, code servers and Ray head take about a sixth of a core
    here, which the other version's trials would pay for. A small step starts its services and loads its
    forkserver and code server, as a home that has just trained is."""
    for other in versions:
        if other is not v:
            stop(other)
    log(f"{v.name}: warming the home")
    v.cli("train", "--experiment", experiment, "--steps", "1", "--worlds", "4", "--prompts", "4", "--json")


def measure(v: Version, workload: str, n: int, latency: float, experiment: str, policy_url: str) -> dict[str, Any]:
    idle = home_pss_mb(v.home)
    cpu0, t0, own0 = machine_cpu_s(), time.perf_counter(), children_cpu_s()
    with PeakPss(v.home) as pss:
        proc = subprocess.run(
            [sys.executable, "-m", "rl_assets.cli", *train_args(workload, n, latency, experiment, policy_url)]
            + ["--home", str(v.home)],
            env=v.env(),
            cwd=v.code,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    wall, cpu, own = time.perf_counter() - t0, machine_cpu_s() - cpu0, children_cpu_s() - own0
    if proc.returncode != 0:  # a version that cannot carry N trials is a result too: its reason is the row
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"version": v.name, "workload": workload, "trials": n, "wall_s": round(wall, 1), "failed": last}
    ledgers = json.loads(v.run("-c", LEDGER_QUERY, str(v.home), experiment, str(latency), workload).stdout)
    trials = ledgers.pop("trials")
    return {
        "version": v.name,
        "workload": workload,
        "trials": trials,
        "wall_s": round(wall, 1),
        **{k: round(x, 1) for k, x in ledgers.items()},
        "x_ideal": round(ledgers["rollout_s"] / ledgers["ideal_s"], 2),
        "pss_mb_per_trial": round(max(0.0, pss.peak - idle) / trials, 1),
        "cpu_s_per_trial": round(cpu / trials, 3),
        "train_cpu_s": round(own, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the earlier commit to compare with")
    parser.add_argument("--trials", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--latency", type=float, default=2.0, help="seconds each tool call or model answer waits")
    parser.add_argument("--workloads", nargs="+", choices=["reference", "tasks"], default=["reference", "tasks"])
    parser.add_argument("--base-up-to", type=int, default=256, help="largest N the earlier commit is run at")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per N, alternating which version goes first")
    parser.add_argument("--json", action="store_true", help="one JSON object per measurement on stdout")
    args = parser.parse_args()
    # A SIGTERM (``kill``, ``timeout``) ends the run through the ``finally`` below, which stops both homes and the
    # stand-in server: by default it would end only this process and leave them running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(tempfile.mkdtemp(prefix="rl-assets-latency-", dir="/tmp"))
    versions = base_and_this(args.base, root, "latency_bound.py")
    server, url = stand_in_server(root, args.latency)
    rows = []
    try:
        for workload in args.workloads:
            for n, r in ((n, r) for n in args.trials for r in range(args.repeat)):
                for v in versions if r % 2 == 0 else versions[::-1]:
                    if v.name == "base" and n > args.base_up_to:
                        continue
                    alone_and_warm(v, versions, f"warm-{workload[:3]}{n}r{r}")
                    row = {"round": r, **measure(v, workload, n, args.latency, f"{workload[:3]}{n}r{r}", url)}
                    rows.append(row)
                    log(json.dumps(row))
                    if args.json:
                        print(json.dumps(row), flush=True)
    finally:
        server.kill()
        for v in versions:
            stop(v)
        shutil.rmtree(root, ignore_errors=True)
    if not args.json:
        head = (
            "workload",
            "trials",
            "round",
            "version",
            "wall_s",
            "rollout_s",
            "ideal_s",
            "x_ideal",
            "pss_mb_per_trial",
            "cpu_s_per_trial",
            "train_cpu_s",
            "failed_trials",
        )
        print(" | ".join(head))
        for r in rows:
            print(" | ".join(str(r.get(k, "-")) for k in head) + (f" | failed: {r['failed']}" if "failed" in r else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
