"""Start, fork and re-score are one set of functions: the CLI and the launchpad refuse a request in the same words.

Each case is sent through both doors against the session's home: the CLI as a
user types it (exit 2, one line naming the flag) and the launchpad's job as the
UI launches it (a failed run, not retried, naming the field). The problem after
the flag or field must be the same text, and neither door may record anything.
"""

from __future__ import annotations

import pytest

from rl_assets.application import experiments
from rl_assets.application.experiments import Refused
from rl_assets.definitions import defs
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import Runtime
from rl_assets.home.layout import Home
from rl_assets_testkit.expectations import run_cli

UNTRAINED = "app-untrained"


@pytest.fixture(scope="module")
def untrained(stores) -> str:
    """An experiment that is recorded but not trained (no drive is requested: nothing trains it)."""
    stores.experiments.create_or_resume(ExperimentConfig(name=UNTRAINED, steps=1), Runtime())
    return UNTRAINED


def _launchpad_problem(job_name: str, op: str, config: dict, instance) -> str:
    job = defs.resolve_job_def(job_name)
    result = job.execute_in_process(
        run_config={"ops": {op: {"config": config}}}, instance=instance, raise_on_error=False
    )
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    error = failure.step_failure_data.error
    assert failure.step_failure_data.user_failure_data is not None, "a refusal is a dg.Failure, not a crash"
    message = error.message.strip()
    assert len(message.splitlines()) == 1 and "invalid config: " in message, message
    return message.split("invalid config: ", 1)[1]


def _cli_problem(home, *args: str) -> str:
    proc = run_cli(home, *args, check=False)
    assert proc.returncode == 2, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("rl-assets: error: ")]
    return line.removeprefix("rl-assets: error: ")


_CASES = [
    pytest.param(
        ["rescore", "--experiment", UNTRAINED, "--rubric", "v2-efficiency"],
        ("rescore_experiment_job", "rescore_experiment", {"experiment": UNTRAINED, "rubric": "v2-efficiency"}),
        (None, None),
        "is not trained yet",
        id="rescore-untrained",
    ),
    pytest.param(
        ["rescore", "--experiment", "app-nosuch", "--rubric", "v2-efficiency"],
        ("rescore_experiment_job", "rescore_experiment", {"experiment": "app-nosuch", "rubric": "v2-efficiency"}),
        ("--experiment", "experiment"),
        "no experiment named 'app-nosuch'",
        id="rescore-unknown",
    ),
    pytest.param(
        ["fork", "--from", "app-nosuch", "--experiment", "app-fork", "--rubric", "v2-efficiency"],
        (
            "fork_experiment_job",
            "fork_experiment",
            {"parent": "app-nosuch", "name": "app-fork", "rubric": "v2-efficiency"},
        ),
        ("--from", "parent"),
        "no experiment named 'app-nosuch'",
        id="fork-unknown-parent",
    ),
    pytest.param(
        ["fork", "--from", UNTRAINED, "--experiment", UNTRAINED, "--rubric", "v2-efficiency"],
        ("fork_experiment_job", "fork_experiment", {"parent": UNTRAINED, "name": UNTRAINED, "rubric": "v2-efficiency"}),
        (None, None),
        "already exists",
        id="fork-onto-itself",
    ),
]


@pytest.mark.parametrize("cli, launchpad, prefixes, problem", _CASES)
def test_the_cli_and_the_launchpad_refuse_a_request_in_the_same_words(
    home, stores, instance, untrained, cli, launchpad, prefixes, problem
):
    scorings, names = stores.scorings.requested(UNTRAINED), stores.experiments.names()
    by_cli = _cli_problem(home, *cli)
    by_launchpad = _launchpad_problem(*launchpad, instance)
    flag, field = prefixes
    if flag is not None:
        assert by_cli.startswith(f"{flag}: ") and by_launchpad.startswith(f"{field}: "), (by_cli, by_launchpad)
        by_cli, by_launchpad = by_cli.removeprefix(f"{flag}: "), by_launchpad.removeprefix(f"{field}: ")
    assert problem in by_cli and by_cli == by_launchpad, (by_cli, by_launchpad)
    assert stores.scorings.requested(UNTRAINED) == scorings and stores.experiments.names() == names


def test_a_rescoring_with_the_experiments_own_rubric_requests_nothing(stores, untrained):
    rescoring = experiments.rescore(stores, untrained, "v1", trained=lambda _: True, requested_by="test")
    assert (rescoring.rubric, rescoring.new) == ("v1", False)
    assert stores.scorings.requested(untrained) == []


def test_a_refusal_names_the_input_at_fault(stores, home, untrained):
    with pytest.raises(Refused) as refused:
        experiments.fork(stores, Home(home), untrained, "Bad Name", "v1")
    assert refused.value.field == "name" and "(got 'Bad Name')" in refused.value.problem
    with pytest.raises(Refused) as refused:
        experiments.rescore(stores, untrained, "no-such-rubric", trained=lambda _: True, requested_by="test")
    assert refused.value.field == "rubric" and "unknown rubric 'no-such-rubric'" in refused.value.problem
    with pytest.raises(Refused) as refused:
        experiments.rescore(stores, untrained, "v2-efficiency", trained=lambda _: False, requested_by="test")
    assert refused.value.field is None and stores.scorings.requested(untrained) == []
