"""A following command's progress: a live bar with counts and an ETA on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io

from rich.console import Console

from rl_assets.cli.progress_display import ProgressDisplay, units
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.driver.planner import Plan, StepStatus, TrialStatus

CONFIG = ExperimentConfig(name="shown", steps=2, worlds=1, prompts=2, samples=1)


def _plan(states: list[str], trained: bool = False) -> Plan:
    trials = [TrialStatus(f"s0-p{i}-n0", f"shown/s0|p{i}-n0", state, 1, 0) for i, state in enumerate(states)]
    return Plan(CONFIG, [], [StepStatus(0, "shown/s0", trials, trained=trained, train_running=False)])


def test_units_count_settled_trials_and_trained_steps_of_the_whole_experiment():
    assert units(_plan(["ok", "running"])) == (1, 6)  # 2 steps x (2 trials + 1 training step)
    assert units(_plan(["ok", "failed"], trained=True)) == (3, 6)
    step1 = StepStatus(1, "shown/s1", [TrialStatus("s1-p0-n0", "shown/s1|p0-n0", "ok", 1, 0)], False, False)
    assert units(Plan(CONFIG, [], [step1], settled=1)) == (4, 6), "a settled step counts whole, though not listed"


def test_off_a_terminal_each_change_is_one_plain_line(capsys):
    display = ProgressDisplay()
    for p in (_plan(["running", "pending"]), _plan(["running", "pending"]), _plan(["ok", "running"])):
        display.plan(p)
    display.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "shown (v1): step 0 (1 of 2) rolling out: 0 ok, 0 failed, 1 running, 1 pending of 2 trials",
        "shown (v1): step 0 (1 of 2) rolling out: 1 ok, 0 failed, 1 running, 0 pending of 2 trials",
    ]
    assert "\r" not in capsys.readouterr().err


def test_on_a_terminal_a_live_bar_shows_counts_and_an_eta():
    out = io.StringIO()
    display = ProgressDisplay(Console(file=out, force_terminal=True, width=200))
    display.plan(_plan(["ok", "running"]))
    display.plan(_plan(["ok", "ok"]))
    display.close()
    shown = out.getvalue()
    assert "2/6" in shown and "eta" in shown
    assert "\x1b[" in shown, "redrawn in place with terminal control codes"
