"""What the run launcher and its workers need of Dagster that Dagster 1.13 exports under no public name: the one
module of theirs that touches Dagster's internals.

Dagster documents ``RunLauncher`` as the extension point for launching runs
(its API reference lists it as ``dagster._core.launcher.RunLauncher``) but
exports neither it nor the types its methods take and return from the
``dagster`` package: ``LaunchRunContext``, ``CheckRunHealthResult``,
``WorkerStatus``. And a launcher that executes a run outside the process
that launched it has one entry point, ``dagster api execute_run``: that is
what Dagster's own launchers (dagster-k8s, dagster-docker, dagster-aws) put
in a pod's or container's command. The warm worker executes the command's
body (``dagster._cli.api``), in-process, with the instance it has open. The
launchers import the same names from the same modules; so does this module,
and nothing else of the launcher's does (``tests/test_dagster_internals.py``
lists every module of rl-assets that imports a private Dagster module).

The dependence is held to :data:`SUPPORTED_DAGSTER` (the range pyproject.toml
pins) and checked twice: importing this module on a Dagster that lost a name
fails with an error naming the installed version, and
``tests/test_dagster_internals.py`` executes a run through
:func:`execute_run` on the installed Dagster in the fast test tier.
"""

from __future__ import annotations

import dagster as dg

SUPPORTED_DAGSTER = ">=1.13.27,<1.14"
"""The Dagster releases this module is known to work with; pyproject.toml pins the same range."""

try:
    from dagster._cli.api import _execute_run_command_body
    from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus
    from dagster._utils.interrupts import capture_interrupts
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
    "execute_run",
    "launcher_instance",
]


def execute_run(run_id: str, instance: dg.DagsterInstance) -> int:
    """Execute the created run ``run_id`` in this process as ``dagster api execute_run`` does; its exit code.

    The command's own body: the cancellation thread, the engine events, the run's execution, a non-zero code
    for a failed run. Not the command itself, which builds an instance of its own (a second one in a worker
    that has one open) and serializes every event of the run once more into a list that nothing reads and
    that lives as long as the run: a rollout run's thousands of materializations and check evaluations, each
    serialized again for nothing (about a twentieth of a rollout worker's CPU).
    """
    with capture_interrupts():
        return _execute_run_command_body(run_id, instance, _discard, set_exit_code_on_failure=True)


def _discard(_event: object) -> None:
    """What the command's body hands each event to: the events are stored already (the instance's event log)."""


def launcher_instance(launcher: dg.DefaultRunLauncher) -> dg.DagsterInstance:
    """The instance a run launcher was registered with: every launcher reads it as ``_instance``, which Dagster
    offers under no public name."""
    return launcher._instance
