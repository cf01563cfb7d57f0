"""This checkout against an earlier commit, measured in the same run: the reference run's wall time and the
per-trial overhead, each as a ratio *this / earlier*.

``python benchmarks/versus.py --base COMMIT [--rounds 3] [--trials 8] [--json]``

The earlier code (the package, its benchmarks and its test kit) is exported from git (``git archive``) into a
temporary directory and run from there (``PYTHONPATH`` ahead of this checkout's editable installs), each version
in a home of its own, so their Postgres data and Ray heads never mix. Both homes' services are brought up first
(not timed), then the versions alternate, round by round, and so does which goes first, so drift on a shared
machine and a first-in-round effect hit both alike:

- **reference run**: ``rl-assets train --experiment refN`` with the reference configuration (3 steps of 6
  trials), a new experiment each round, wall time of the whole command on a warm home;
- **per-trial overhead**: each version's own ``benchmarks/bench.py --parts trial`` in every round: the median
  wall time of a zero-work ``trial_job`` run (rollout in the sandbox plus judging), created and executed as its
  CLI driver does (a run launched through the home's run launcher), and the median over the rounds.

Both homes are stopped at the end (``rl-assets stop``), and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def log(message: str) -> None:
    print(f"[versus] {message}", file=sys.stderr, flush=True)


def export(commit: str, into: Path) -> None:
    """The commit's tree (code and benchmarks) under ``into``.

    ``PYTHONPATH`` (and the working directory) put it ahead of the checkout's editable install, whose import
    finder comes after the path finder, for the CLI and every process it starts (driver, workers, Ray's).
    """
    listed = subprocess.run(["git", "ls-tree", "--name-only", commit], cwd=REPO, capture_output=True, text=True)
    # The test kit too, where the commit has one: the benchmarks import it, and the checkout's editable test kit
    # would otherwise drive the earlier code with this checkout's modules.
    parts = [p for p in ("rl_assets", "benchmarks", "testkit") if p in listed.stdout.split()]
    archive = subprocess.run(["git", "archive", commit, *parts], cwd=REPO, capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"versus.py: cannot export {commit}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def imported_from(version: Version) -> Path:
    """Where ``rl_assets`` comes from for ``version``'s processes (checked, so a benchmark never compares a
    version with itself)."""
    probe = "import rl_assets, rl_assets_testkit; print(rl_assets.__file__); print(rl_assets_testkit.__file__)"
    package, kit = (Path(line) for line in version.run("-c", probe).stdout.split())
    if not kit.is_relative_to(version.code):
        raise SystemExit(f"versus.py: {version.name} imports the test kit from {kit}, not from {version.code}")
    return package.parent.parent


class Version:
    """One version of the code, run from ``code`` with a home of its own."""

    def __init__(self, name: str, code: Path, home: Path) -> None:
        self.name, self.code, self.home = name, code, home

    def env(self) -> dict[str, str]:
        path = os.pathsep.join(str(p) for p in (self.code, self.code / "testkit") if p.is_dir())
        return {**os.environ, "PYTHONPATH": path, "RL_ASSETS_HOME": str(self.home)}

    def run(self, *args: str, capture: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, *args],
            env=self.env(),
            cwd=self.code,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise SystemExit(
                f"versus.py: {self.name}: {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}"
            )
        return proc

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("-m", "rl_assets.cli", *args, "--home", str(self.home))


def base_and_this(base: str, root: Path, script: str) -> list[Version]:
    """The earlier commit exported under ``root`` and this checkout, each with a home there; each checked to
    import its own code (so a benchmark never compares a version with itself)."""
    root.chmod(0o755)  # the embedded Postgres runs as its own user when we are root: it must reach the homes
    (root / "base").mkdir()
    export(base, root / "base")
    versions = [Version("base", root / "base", root / "home-base"), Version("this", REPO, root / "home-this")]
    for v in versions:
        if imported_from(v).resolve() != v.code.resolve():
            raise SystemExit(f"{script}: {v.name} imports rl_assets from {imported_from(v)}, not {v.code}")
    return versions


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base", required=True, help="the earlier commit to compare with (e.g. main's tip before a change)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="reference runs per version, alternating")
    parser.add_argument("--trials", type=int, default=8, help="trial runs in each version's per-trial median")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rl-assets-versus-", dir="/tmp"))
    versions = base_and_this(args.base, root, "versus.py")
    results: dict[str, Any] = {"base": args.base, "reference_s": {}, "trial_s": {}}
    try:
        for v in versions:
            log(f"{v.name}: bringing the home's services up")
            v.cli("rubrics")  # starts Postgres (and the schema) the way every command does
        for n in range(args.rounds):
            order = versions if n % 2 == 0 else versions[::-1]  # who goes first alternates too
            for v in order:
                seconds = timed(lambda v=v, n=n: v.cli("train", "--experiment", f"ref{n}", "--json"))
                results["reference_s"].setdefault(v.name, []).append(seconds)
                log(f"round {n}: {v.name} reference run {seconds:.1f} s")
            for v in order:
                out = v.run(
                    "benchmarks/bench.py",
                    *("--home", str(v.home), "--parts", "trial", "--trials", str(args.trials), "--json"),
                )
                trial_s = json.loads(out.stdout)["trial"]["trial_wall_s"]
                results["trial_s"].setdefault(v.name, []).append(trial_s)
                log(f"round {n}: {v.name} median trial run {trial_s:.2f} s")
    finally:
        for v in versions:
            subprocess.run(
                [sys.executable, "-m", "rl_assets.cli", "stop", "--home", str(v.home)], env=v.env(), capture_output=True
            )
        shutil.rmtree(root, ignore_errors=True)
    ref = {name: statistics.median(times) for name, times in results["reference_s"].items()}
    t = {name: statistics.median(times) for name, times in results["trial_s"].items()}
    results["ratios"] = {"reference_run": ref["this"] / ref["base"], "trial_run": t["this"] / t["base"]}
    if args.json:
        print(json.dumps(results))
    else:
        print(f"against {args.base}, {args.rounds} alternating rounds (median):")
        print(f"{'measurement':<22} {'base':>9} {'this':>9} {'this/base':>10}")
        print(
            f"{'reference run (train)':<22} {ref['base']:>8.1f}s {ref['this']:>8.1f}s "
            f"{results['ratios']['reference_run']:>9.2f}x"
        )
        print(
            f"{'zero-work trial run':<22} {t['base']:>8.2f}s {t['this']:>8.2f}s {results['ratios']['trial_run']:>9.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
