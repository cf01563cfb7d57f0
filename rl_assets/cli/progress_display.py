"""What a following command shows while the daemon trains: a live bar on a terminal, plain lines otherwise.

On a terminal (stderr a TTY) a `rich <https://rich.readthedocs.io>`_ progress
bar counts the experiment's units (trials settled and steps trained, out of
all of them) with the elapsed time and an ETA, under one status line that
says what the step is doing. Anywhere else (a pipe, a CI log) each change of
status is one plain line, and nothing is redrawn.
"""

from __future__ import annotations

import sys
from typing import Any

from rl_assets.driver.planner import Plan


def units(p: Plan) -> tuple[int, int]:
    """(done, total): trials settled (ok or failed for good) and steps trained, out of the whole experiment's."""
    trials_per_step = len(p.config.trial_slots())
    total = p.config.steps * (trials_per_step + 1)
    done = p.settled * (trials_per_step + 1)
    done += sum(s.count("ok") + s.count("failed") + (1 if s.trained else 0) for s in p.steps)
    return done, total


class ProgressDisplay:
    """The experiment's progress on stderr: :meth:`plan` after each poll, :meth:`note` for anything else."""

    def __init__(self, console: Any = None) -> None:
        """Live on ``console`` (a ``rich`` console) if given, else live exactly when stderr is a terminal."""
        self.console = console
        self.live = console is not None or sys.stderr.isatty()
        self.last = ""
        self._bar: Any = None
        self._task: Any = None

    def plan(self, p: Plan) -> None:
        done, total = units(p)
        self.note(p.describe(), done, total)

    def note(self, text: str, done: int | None = None, total: int | None = None) -> None:
        if not self.live:
            if text != self.last:
                print(text, file=sys.stderr, flush=True)
            self.last = text
            return
        self._ensure_bar()
        fields: dict[str, Any] = {"description": text}
        if done is not None and total is not None:
            fields.update(completed=done, total=total)
        self._bar.update(self._task, **fields)
        self.last = text

    def _ensure_bar(self) -> None:
        if self._bar is not None:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console or Console(stderr=True),
            transient=False,
        )
        self._task = self._bar.add_task("", total=None)
        self._bar.start()

    def close(self) -> None:
        """Stop redrawing, so whatever is printed next (a result, an error) starts on its own line."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        self.last = ""
