"""A following command plans again at once when a run or a drive request changes, else once its plan is old."""

from __future__ import annotations

from rl_assets.cli.replanning import Replanning


def test_the_first_look_plans():
    assert Replanning(refresh_s=2.0).due(("runs", 1), now=100.0)


def test_nothing_changed_and_a_fresh_plan_is_not_planned_again():
    replanning = Replanning(refresh_s=2.0)
    replanning.due(("runs", 1), now=100.0)
    assert not replanning.due(("runs", 1), now=100.5)
    assert not replanning.due(("runs", 1), now=101.9)


def test_a_change_plans_at_once_and_counts_as_the_latest_plan():
    replanning = Replanning(refresh_s=2.0)
    replanning.due(("runs", 1), now=100.0)
    assert replanning.due(("runs", 2), now=100.5), "a run started or ended: plan now"
    assert not replanning.due(("runs", 2), now=101.0), "the change was planned for"
    assert not replanning.due(("runs", 2), now=102.4), "its plan is fresh until 102.5"


def test_an_old_plan_is_planned_again_for_the_progress_line():
    replanning = Replanning(refresh_s=2.0)
    replanning.due(("runs", 1), now=100.0)
    assert replanning.due(("runs", 1), now=102.0)
    assert not replanning.due(("runs", 1), now=103.0)
    assert replanning.due(("runs", 1), now=104.0)
