"""What the run launcher and its workers need of Dagster that Dagster 1.13 exports under no public name: the one
module of theirs that touches Dagster's internals.

Dagster documents ``RunLauncher`` as the extension point for launching runs
(its API reference lists it as ``dagster._core.launcher.RunLauncher``) but
exports neither it nor the types its methods take and return from the
``dagster`` package: ``LaunchRunContext``, ``CheckRunHealthResult``,
``WorkerStatus``. And a launcher that executes a run outside the process
that launched it has one entry point, ``dagster api execute_run``, whose one
argument is a serialized ``ExecuteRunArgs`` (``dagster._grpc.types``): that
is what Dagster's own launchers (dagster-k8s, dagster-docker, dagster-aws)
put in a pod's or container's command. They import the same names from the
same modules; so does this module, and nothing else of the launcher's does
(``tests/test_dagster_internals.py`` lists every module of rl-assets that
imports a private Dagster module).

The dependence is held to :data:`SUPPORTED_DAGSTER` (the range pyproject.toml
pins) and checked twice: importing this module on a Dagster that lost a name
fails with an error naming the installed version, and
``tests/test_dagster_internals.py`` executes a run through
:func:`execute_run_argv` on the installed Dagster in the fast test tier.
"""

from __future__ import annotations

import dagster as dg

SUPPORTED_DAGSTER = ">=1.13.27,<1.14"
"""The Dagster releases this module is known to work with; pyproject.toml pins the same range."""

try:
    from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus
    from dagster._grpc.types import ExecuteRunArgs
except ImportError as err:  # pragma: no cover - only on a Dagster outside SUPPORTED_DAGSTER
    raise ImportError(
        f"rl-assets' run launcher needs Dagster {SUPPORTED_DAGSTER}; Dagster {dg.__version__} no longer has "
        f"{err.name or err}: see rl_assets/instance/dagster_internals.py"
    ) from err

__all__ = [
    "SUPPORTED_DAGSTER",
    "CheckRunHealthResult",
    "LaunchRunContext",
    "WorkerStatus",
    "execute_run_argv",
    "launcher_instance",
]


def execute_run_argv(run: dg.DagsterRun) -> list[str]:
    """The arguments of ``dagster`` that execute ``run``: ``api execute_run <ExecuteRunArgs>``.

    Built with Dagster's own ``ExecuteRunArgs`` as its launchers build it, not written out by hand: the
    serialized form is Dagster's to change. ``instance_ref`` is None, so the executing process builds its
    instance from ``DAGSTER_HOME`` as every other process of a home does.
    """
    if run.job_code_origin is None:
        raise ValueError(f"run {run.run_id} has no code origin to execute")
    command = ExecuteRunArgs(
        job_origin=run.job_code_origin,
        run_id=run.run_id,
        instance_ref=None,
        set_exit_code_on_failure=True,
    ).get_command_args()
    return list(command[command.index("api") :])  # what follows the entry point (`dagster`, `python -m dagster`)


def launcher_instance(launcher: dg.DefaultRunLauncher) -> dg.DagsterInstance:
    """The instance a run launcher was registered with: every launcher reads it as ``_instance``, which Dagster
    offers under no public name."""
    return launcher._instance
