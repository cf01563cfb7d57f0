"""The example tasks trained clean and under chaos against the stand-in model server, each in a fresh home.

``python benchmarks/task_chaos.py [--dir DIR] [--json]``

Both runs are ``rl-assets train --tasks examples/tasks`` with the LLM judge, 2 steps of 2 samples, 8 turns
and a 10 s trial timeout, each against its own stand-in server (a real HTTP process speaking the Chat
Completions API, answering the example tasks' solutions by content). The chaos run adds the fault flags
(``--flaky-trial-rate 0.3 --hang-trial-rate 0.2 --judge-flake-rate 0.3``), and its server answers each
distinct request first with a 500, then with a 429 (``Retry-After``). Printed per run: wall time, the
requests each server answered (policy and judge) and the faults it served, the run's own counts and
bill, and each trial's rewards, which must be the same in both runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from rl_assets_testkit.example_solutions import JUDGE_MODEL, POLICY_MODEL, script
from rl_assets_testkit.served_model import ServedModel

TASKS = Path(__file__).resolve().parents[1] / "examples" / "tasks"
CHAOS_FLAGS = ("--flaky-trial-rate", "0.3", "--hang-trial-rate", "0.2", "--judge-flake-rate", "0.3")
SERVER_FAULTS = {"server_errors": 1, "rate_limited": 1, "retry_after_s": 0.05}


def run(directory: Path, name: str, chaos: bool) -> dict[str, Any]:
    home = directory / f"home-{name}"
    with ServedModel(script(SERVER_FAULTS if chaos else None), directory.joinpath(name).resolve()) as server:
        args = [
            *("--experiment", name, "--tasks", str(TASKS), "--home", str(home)),
            *("--policy-url", server.base_url, "--policy-model", POLICY_MODEL),
            *("--judge-url", server.base_url, "--judge-model", JUDGE_MODEL),
            *("--steps", "2", "--samples", "2", "--max-turns", "8", "--trial-timeout", "10", "--json"),
            *(CHAOS_FLAGS if chaos else ()),
        ]
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "rl_assets.cli", "train", *args], capture_output=True, text=True)
        wall = time.monotonic() - start
        with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/stats") as answer:
            stats = json.load(answer)
    subprocess.run([sys.executable, "-m", "rl_assets.cli", "stop", "--home", str(home)], capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: train exited {proc.returncode}: {proc.stderr[-2000:]}")
    result = json.loads(proc.stdout)
    return {
        "wall_s": round(wall, 1),
        "answered": stats["answered"],
        "faults": stats["faults"],
        "counts": result["counts"],
        "cost": result["cost"],
        "trials": {
            t["trial_id"]: [t["verifier_reward"], t["judge_score"], t["reward"], t["turns"]] for t in result["trials"]
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="where the homes go (default: a temporary directory, removed)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="rl-assets-chaos-"))
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)  # the embedded Postgres may run as its own user (as root): it must reach its home
    for sub in ("clean", "chaos"):
        directory.joinpath(sub).mkdir(exist_ok=True)
    try:
        results = {"clean": run(directory, "clean", False), "chaos": run(directory, "chaos", True)}
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    results["same_rewards"] = results["clean"]["trials"] == results["chaos"]["trials"]
    print(json.dumps(results, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
