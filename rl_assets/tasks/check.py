"""``rl-assets tasks check``: every task of a set validated, as a table a person reads, without running anything.

The CLI only prints what this returns, so the check's rules (what is a row, a refusal, a problem) live
with the tasks they are about.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rl_assets.tasks.locality import local_fit
from rl_assets.tasks.task import InvalidTaskError, load_task, task_dirs

ORACLE_NOTE = (
    "solutions are not run yet: the oracle run (solution/solve.sh through the sandbox and the verifier) "
    "comes with the sandbox support for tasks"
)
HEADER = ("task", "version", "environment", "verifier timeout", "solution", "not applied locally")


@dataclass(frozen=True)
class TaskCheck:
    """What checking a task set found: a row per valid task, local refusals, and one line per problem."""

    rows: list[tuple[str, ...]]
    refusals: list[str]
    problems: list[str]
    checked: int

    @property
    def invalid(self) -> int:
        return self.checked - len(self.rows)

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
        return f"{len(self.rows)} valid, {self.invalid} invalid task(s); {ORACLE_NOTE}"


def check_tasks(root: Path) -> TaskCheck:
    """Validate every task directory of ``root`` (or ``root`` itself, if it is one task)."""
    dirs = task_dirs(root)
    rows: list[tuple[str, ...]] = []
    refusals: list[str] = []
    problems: list[str] = []
    for path in dirs:
        try:
            task = load_task(path)
        except InvalidTaskError as err:
            problems.extend(err.problems)
            continue
        fit = local_fit(task)
        refusals.extend(f"{task.name}: {reason}" for reason in fit.refusals)
        version = (task.config.task.version if task.config.task else None) or "-"
        rows.append(
            (
                task.name,
                version,
                task.environment_kind,
                f"{task.config.verifier.timeout_sec:g}s",
                "yes" if task.has_solution else "no",
                "; ".join(fit.ignored) or "-",
            )
        )
    return TaskCheck(rows, refusals, problems, len(dirs))
