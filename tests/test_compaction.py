"""``rl-assets compact``: a finished experiment sheds its step events and run logs, and nothing it needs.

A reference experiment is trained, compacted through the CLI, and then read every way it is used:
its materialized partitions, its asset check evaluations and runs' outcomes (the UI), ``report``
(every check over the records), and a re-scoring (which reuses every trajectory) all read as before;
the step events, log lines, captured stdout/stderr and worker logs of its runs are gone; compacting
again deletes nothing; an unknown or unfinished experiment is refused on one line. `train` returns only once
its runs have ended, so compacting straight after it is not refused.
"""

from __future__ import annotations

import json
import uuid

import dagster as dg
import pytest

from rl_assets.cli.commands import _await_runs_ending
from rl_assets.cli.compaction import finished_runs, runs_in_flight
from rl_assets.domain.run_tags import EXPERIMENT_TAG
from rl_assets.stores.event_compaction import DROPPED, EventCompaction
from rl_assets_testkit.expectations import cli_args, run_cli, train_json

NAME = "compacted"
FIELDS = dict(steps=2, worlds=1, prompts=1, samples=2)
"""The smallest experiment with everything compaction acts on: worlds, trial and train runs, two chained steps
(so a re-scoring retrains a step from a re-scored parent read after compaction)."""
ASSETS = ("worlds", "trajectories", "rewards", "weights")


@pytest.fixture(scope="module")
def trained(home) -> dict:
    return train_json(home, *cli_args(NAME, FIELDS))


def _runs(instance) -> list[str]:
    return [run_id for page in finished_runs(instance, NAME) for run_id in page]


def _partitions(instance) -> dict[str, set[str]]:
    return {a: set(instance.get_materialized_partitions(dg.AssetKey(a))) for a in ASSETS}


def _report(home) -> dict:
    return json.loads(run_cli(home, "report", "--experiment", NAME, "--audit", "--json").stdout)


def _compact(home) -> dict:
    return json.loads(run_cli(home, "compact", "--experiment", NAME, "--json").stdout)


def test_train_returns_once_its_runs_have_ended_so_compacting_straight_after_is_not_refused(trained, instance):
    # First in the module, straight after ``train``: the last train run records its end a moment after the
    # weights it wrote make the plan done (0.3 s later, measured), and `compact` refuses runs in flight.
    assert runs_in_flight(instance, NAME) == 0


def test_a_following_command_waits_for_a_run_in_flight_to_end(instance):
    # The same wait without the race: a run of the experiment is in flight until the command, waiting, notes it.
    run = dg.DagsterRun(job_name="train_job", run_id=str(uuid.uuid4()), status=dg.DagsterRunStatus.STARTED)
    instance.add_run(run.with_tags({EXPERIMENT_TAG: "ending"}))
    notes: list[str] = []

    class Progress:
        def note(self, text: str) -> None:
            notes.append(text)
            instance.report_run_failed(instance.get_run_by_id(run.run_id))

    _await_runs_ending(instance, "ending", Progress())
    assert notes == ["ending: waiting for 1 run(s) to record their end"]
    assert runs_in_flight(instance, "ending") == 0


def test_compacting_keeps_what_the_ui_report_and_rescoring_read_and_drops_the_rest(home, trained, stores, instance):
    runs = _runs(instance)
    events = EventCompaction(stores.db)
    before = events.events_by_type(runs)
    assert before.get("ENGINE_EVENT") and before.get("log"), "a run's step chatter is there to compact"
    partitions, report = _partitions(instance), _report(home)
    storage = home / "dagster" / "storage"
    assert any((storage / r).exists() for r in runs) and any((home / "logs" / f"run-{r}.log").exists() for r in runs)

    done = _compact(home)
    dropped = sum(n for kind, n in before.items() if kind in DROPPED or kind == "log")
    assert done["runs"] == len(runs) and done["events_deleted"] == dropped and done["log_bytes"] > 0

    after = events.events_by_type(runs)
    assert not set(after) & {*DROPPED, "log"}
    # PIPELINE_SUCCESS: a run's success, under its historical name in the event log
    for kept in (
        "ASSET_MATERIALIZATION",
        "ASSET_MATERIALIZATION_PLANNED",
        "ASSET_CHECK_EVALUATION",
        "PIPELINE_SUCCESS",
    ):
        assert after[kept] == before[kept], kept
    assert not any((storage / r).exists() for r in runs)
    assert not any((home / "logs" / f"run-{r}.log").exists() for r in runs)
    assert _partitions(instance) == partitions
    assert _report(home) == report
    assert _compact(home) == {**done, "events_deleted": 0, "log_bytes": 0}, "compacting twice deletes nothing"

    generated = trained["counts"]["generate_attempts"]
    rescored = json.loads(run_cli(home, "rescore", "--experiment", NAME, "--rubric", "v2-efficiency", "--json").stdout)
    assert rescored["counts"]["generate_attempts"] == generated, "re-scoring reuses every compacted trajectory"
    assert [s["trials_ok"] for s in rescored["steps"]] == [s["trials_ok"] for s in trained["steps"]]


def test_compact_refuses_an_unknown_experiment_on_one_line(home):
    proc = run_cli(home, "compact", "--experiment", "no-such-experiment", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("rl-assets: error: --experiment: no experiment named")
