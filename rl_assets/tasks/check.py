"""``rl-assets tasks check``: every task of a set validated and its solution run as the oracle, as a table.

The CLI only prints what this returns, so the check's rules (what is a row, a refusal, a problem, a
failure) live with the tasks they are about. Running a solution needs the task sandbox, a layer above
this package, so the CLI passes the runner in (:data:`Oracle`); here a task is only chosen to run: a
valid one, runnable locally, with a ``solution/solve.sh``.

The tasks are untrusted and checked as ``train`` records them: a link or special file anywhere in a
task is one problem naming it (:func:`~rl_assets.tasks.task.load_task`), and the oracle runs on a
private copy made without following any link and checked again
(:func:`~rl_assets.tasks.snapshot.stage_task`), never on the source, which its author may change
between the check and the run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rl_assets.tasks.locality import kubernetes_refusals, local_fit, offline_hint
from rl_assets.tasks.snapshot import TaskCopyError, stage_task
from rl_assets.tasks.task import InvalidTaskError, Task, load_task, task_dirs

HEADER = ("task", "version", "environment", "verifier timeout", "solution", "reward", "seconds", "notes")
NO_SOLUTION = "no solution: validated only"


@dataclass(frozen=True)
class OracleRun:
    """A task's ``solution/solve.sh`` run as the agent, then its verifier: the reward, or why there is none."""

    seconds: float
    reward: float | None = None
    error: str | None = None
    """The verifier's error or the sandbox's refusal (``TypeName: message``) when there is no reward."""
    solve: str = ""
    """How ``solve.sh`` ended (``exit 0``, ``timed out after 600s``): Harbor verifies whatever it left."""
    output: str = ""
    """What the verifier (or a failed image build) printed, shown in part when the reward is not 1."""

    @property
    def passed(self) -> bool:
        return self.reward == 1.0


Oracle = Callable[[Task], OracleRun]


@dataclass(frozen=True)
class Refusal:
    """Why a valid task cannot run in this machine's sandbox, and whether it can run on Kubernetes instead."""

    task: str
    reasons: tuple[str, ...]
    """Why not locally (:func:`~rl_assets.tasks.locality.local_fit`)."""
    kubernetes: tuple[str, ...]
    """Why not in a task pod either (:func:`~rl_assets.tasks.locality.kubernetes_refusals`); empty: it can."""

    def lines(self) -> list[str]:
        """One line per reason; "runs on Kubernetes" only when nothing refuses it there."""
        if not self.kubernetes:
            return [f"refused locally (runs on Kubernetes with its image): {self.task}: {r}" for r in self.reasons]
        return [
            *(f"refused locally: {self.task}: {r}" for r in self.reasons),
            *(f"refused on Kubernetes too: {self.task}: {r}" for r in self.kubernetes),
        ]


@dataclass(frozen=True)
class TaskCheck:
    """What checking a task set found: a row per valid task, local refusals, problems and oracle failures."""

    rows: list[tuple[str, ...]]
    refusals: list[Refusal]
    """One per valid task this machine's sandbox cannot run."""
    problems: list[str]
    failures: list[str]
    """One line per task whose solution did not reach reward 1, or whose verifier failed."""
    checked: int
    ran: int
    unsolved: int
    """Valid tasks without a ``solution/solve.sh``."""

    @property
    def refused(self) -> int:
        """Valid tasks this machine's sandbox cannot run."""
        return len(self.refusals)

    @property
    def invalid(self) -> int:
        return self.checked - len(self.rows)

    @property
    def ok(self) -> bool:
        """Every task valid, runnable here, and solved by its solution where it has one."""
        return not self.invalid and not self.failures and not self.refusals

    def table(self) -> list[str]:
        """The rows under :data:`HEADER`, columns aligned (the last one, free text, is not padded)."""
        if not self.rows:
            return []
        widths = [max(len(row[i]) for row in (HEADER, *self.rows)) for i in range(len(HEADER) - 1)]
        return [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
            for row in (HEADER, *self.rows)
        ]

    def summary(self) -> str:
        parts = [f"oracle: {self.ran - len(self.failures)} of {self.ran} solution(s) reach reward 1"]
        if self.unsolved:
            parts.append(f"{self.unsolved} without a solution (validated only)")
        if self.refused:
            parts.append(f"{self.refused} refused locally")
        return f"{len(self.rows)} valid, {self.invalid} invalid task(s); " + ", ".join(parts)


OUTPUT_TAIL_LINES = 15


def _tail(output: str) -> str:
    """The last lines of what the verifier printed, indented under its failure (Harbor's verifiers often fetch
    tools over the network at verify time: their output says so)."""
    lines = output.strip().splitlines()[-OUTPUT_TAIL_LINES:]
    return "".join(f"\n    | {line}" for line in lines)


def check_tasks(root: Path, oracle: Oracle, containers: bool = False) -> TaskCheck:
    """Validate every task directory of ``root`` (or ``root`` itself, if it is one task); run each solution;
    ``containers``: a container runtime is here, so image tasks run locally too.

    ``root`` is the caller's choice and may be reached through a link; nothing in it is (a task that is
    a link in a set is refused like a link in a task).
    """
    if root.is_symlink():
        root = root.resolve()
    dirs = task_dirs(root)
    with tempfile.TemporaryDirectory(prefix="rl-assets-check-") as private:
        return _check(dirs, oracle, Path(private), containers)


def _check(dirs: list[Path], oracle: Oracle, private: Path, containers: bool) -> TaskCheck:
    rows: list[tuple[str, ...]] = []
    refusals: list[Refusal] = []
    problems: list[str] = []
    failures: list[str] = []
    ran = unsolved = 0
    for path in dirs:
        try:
            task = load_task(path)
        except InvalidTaskError as err:
            problems.extend(err.problems)
            continue
        fit = local_fit(task, containers)
        if not fit.runs_locally:
            refusals.append(Refusal(task.name, fit.refusals, kubernetes_refusals(task)))
        notes = list(fit.ignored)
        reward = seconds = "-"
        if not task.has_solution:
            unsolved += 1
            notes.insert(0, NO_SOLUTION)
        elif fit.runs_locally:
            try:  # the oracle runs on a private copy, checked again: never on the source
                copy = stage_task(task, private / path.name)
            except TaskCopyError as err:
                problems.append(str(err))
                continue
            ran += 1
            run = oracle(copy)
            reward = "error" if run.reward is None else str(run.reward)
            seconds = f"{run.seconds:.2f}"
            hint = "".join(f"\n    {line}" for line in offline_hint(task))
            if run.error is not None:
                failures.append(f"{task.name}: oracle: {run.error} (solve.sh: {run.solve}){hint}{_tail(run.output)}")
            elif not run.passed:
                failures.append(
                    f"{task.name}: oracle reward {run.reward}, not 1 (solve.sh: {run.solve}){hint}{_tail(run.output)}"
                )
        version = (task.config.task.version if task.config.task else None) or "-"
        rows.append(
            (
                task.name,
                version,
                task.environment_kind,
                f"{task.config.verifier.timeout_sec:g}s",
                "yes" if task.has_solution else "no",
                reward,
                seconds,
                "; ".join(notes) or "-",
            )
        )
    return TaskCheck(rows, refusals, problems, failures, len(dirs), ran, unsolved)
