"""What the run launcher needs of Dagster's internals still holds on the installed Dagster.

Each failure names the installed Dagster version: a release that moved or changed one of these names fails here,
in the fast tier, not in a worker's log. ``rl_assets/instance/dagster_internals.py`` says what is used and why.
"""

from __future__ import annotations

import os
import re
import tomllib
import typing
from pathlib import Path

import dagster as dg
from packaging.specifiers import SpecifierSet

from rl_assets.domain.run_tags import WORKER_PID_TAG
from rl_assets.home.layout import HOME_ENV
from rl_assets.instance.dagster_internals import (
    SUPPORTED_DAGSTER,
    CheckRunHealthResult,
    LaunchRunContext,
    WorkerStatus,
    execute_run,
    launcher_instance,
)
from rl_assets.instance.run_launcher import WarmRunLauncher

ROOT = Path(__file__).resolve().parents[1]
DAGSTER = f"Dagster {dg.__version__}"
PRIVATE_IMPORT = re.compile(r"^\s*(?:from|import)\s+dagster\._", re.MULTILINE)
KNOWN_PRIVATE_IMPORTERS = {
    "rl_assets/instance/dagster_internals.py",
    # The dev server's UI serves a workspace through dagster-webserver's app factory (not the launcher's concern).
    "rl_assets/home/services/ui_webserver.py",
}


@dg.op
def _answer() -> int:
    return 42


@dg.job(executor_def=dg.in_process_executor)
def contract_job() -> None:
    _answer()


@dg.op
def _refuse() -> None:
    raise RuntimeError("this op fails")


@dg.job(executor_def=dg.in_process_executor)
def failing_job() -> None:
    _refuse()


def test_the_installed_dagster_is_in_the_supported_range_and_pyproject_pins_that_range():
    assert dg.__version__ in SpecifierSet(SUPPORTED_DAGSTER), f"{DAGSTER} is outside {SUPPORTED_DAGSTER}"
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {d.split(">=")[0].split("==")[0]: d for d in deps if d.startswith("dagster")}
    assert pinned["dagster"] == f"dagster{SUPPORTED_DAGSTER}", pinned


def test_only_the_adapter_imports_the_launchers_private_dagster_modules():
    importers = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "rl_assets").rglob("*.py")
        if PRIVATE_IMPORT.search(path.read_text())
    }
    assert importers == KNOWN_PRIVATE_IMPORTERS


def test_the_health_result_is_the_one_dagsters_run_monitoring_expects():
    returned = typing.get_type_hints(dg.DefaultRunLauncher.check_run_worker_health)["return"]
    assert returned is CheckRunHealthResult, f"{DAGSTER}: check_run_worker_health returns {returned}"
    assert {"RUNNING", "NOT_FOUND", "FAILED"} <= set(WorkerStatus.__members__), f"{DAGSTER}: {list(WorkerStatus)}"
    result = CheckRunHealthResult(WorkerStatus.FAILED, "died", run_worker_id="1@2")
    assert (result.status, result.msg, result.run_worker_id) == (WorkerStatus.FAILED, "died", "1@2"), DAGSTER
    launch = typing.get_type_hints(dg.DefaultRunLauncher.launch_run)["context"]
    assert launch is LaunchRunContext, f"{DAGSTER}: launch_run takes {launch}"


def test_a_launcher_reads_the_instance_it_was_registered_with(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with dg.DagsterInstance.get() as instance:
        launcher = WarmRunLauncher()
        launcher.register_instance(instance)
        assert launcher_instance(launcher) is instance, DAGSTER
        run = instance.create_run_for_job(job_def=contract_job)
        instance.add_run_tags(run.run_id, {WORKER_PID_TAG: "1@1"})
        assert launcher.terminate(run.run_id) is False, "a worker that is not alive is not signalled"


def test_the_worker_executes_a_created_run_with_the_commands_body(tmp_path, monkeypatch):
    """The worker's own path (tag, claim, ``dagster api execute_run``'s body in-process) on a throwaway instance."""
    from rl_assets.instance import run_worker

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    (tmp_path / "dagster").mkdir()
    (tmp_path / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (tmp_path / "home" / "services").mkdir(parents=True, mode=0o700)
    recon = dg.reconstructable(contract_job)
    with dg.DagsterInstance.get() as instance:
        run = instance.create_run_for_job(job_def=contract_job, job_code_origin=recon.get_python_origin())
        code = run_worker.main(run.run_id)
        done = instance.get_run_by_id(run.run_id)
        engine = [e.dagster_event.message for e in instance.all_logs(run.run_id) if e.dagster_event is not None]
    assert code == 0 and done is not None, f"{DAGSTER}: the worker exited {code}"
    assert done.status == dg.DagsterRunStatus.SUCCESS, f"{DAGSTER}: the run ended {done.status}"
    assert done.tags[WORKER_PID_TAG], "the worker tagged its run"
    started = [m for m in engine if (m or "").startswith("Started process for run")]
    assert started == [f"Started process for run (pid: {os.getpid()})."], f"{DAGSTER}: the command's engine events"


def test_a_run_without_a_code_origin_is_not_executed(tmp_path, monkeypatch, capsys):
    from rl_assets.instance import run_worker

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with dg.DagsterInstance.get() as instance:
        run = instance.create_run_for_job(job_def=contract_job)
        assert run_worker.main(run.run_id) == 2
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.NOT_STARTED
    assert f"no executable run {run.run_id}" in capsys.readouterr().err


def test_a_failed_run_gives_the_commands_non_zero_exit_code(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    recon = dg.reconstructable(failing_job)
    with dg.DagsterInstance.get() as instance:
        run = instance.create_run_for_job(job_def=failing_job, job_code_origin=recon.get_python_origin())
        code = execute_run(run.run_id, instance)
        done = instance.get_run_by_id(run.run_id)
    assert code == 1, f"{DAGSTER}: a failed run exited {code}"
    assert done is not None and done.status == dg.DagsterRunStatus.FAILURE, f"{DAGSTER}: {done and done.status}"
