"""Failures that will repeat: what a following command stops on, instead of waiting for progress that cannot come.

A driver sensor whose tick fails (a resource the daemon cannot set up, say) launches nothing, so nothing fails
that the driver could give up on; a run that fails before any of its steps starts (a resource, the job's code,
its worker, its launch) fails the same way each time it is launched again. The follower watches both and stops
on the second identical failure: identical once the run's own id is taken out of the message, so a flaky
failure (a worker SIGKILLed, whose message names its pid; a sandbox fault inside a step, which the step's own
retries and the driver's give-up rule handle) never looks like a repeating one. A run failed by Dagster's run
monitoring for not starting in time is left out too: a machine too loaded to start a worker is not broken.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dagster as dg
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from rl_assets.domain.run_tags import EXPERIMENT_TAG, PARTITION_TAG

DRIVER_SENSORS = ("driver_sensor", "training_sensor")
REPEATS = 2
"""Identical failures that make a failure one that will repeat."""
WATCH_EVERY_S = 2.0
OUTAGE = re.compile(
    r"OperationalError|InterfaceError|could not connect|Connection refused|server closed the connection"
)
"""A database outage: the follower waits it out (and the driver goes on after it), so it never counts here."""


@dataclass(frozen=True)
class Failure:
    where: str
    """``sensor driver_sensor``, or ``run <id> (<job> <partition>)``."""
    error: str
    """The error's first line (its innermost cause: what the user can act on)."""
    run_id: str | None = None

    def line(self) -> str:
        before = " before starting" if self.run_id else ""
        return f"{self.where} failed{before} {REPEATS} times alike: {self.error}"


def _innermost(error: Any) -> Any:
    while getattr(error, "cause", None) is not None:
        error = error.cause
    return error


def _first_line(error: Any) -> str:
    """``Class: message`` of a serialized error's innermost cause, first line only."""
    inner = _innermost(error)
    lines = (inner.message or "").strip().splitlines()
    return lines[0] if lines else (inner.cls_name or "an error with no message")


def run_failure(instance: DagsterInstance, run: dg.DagsterRun) -> tuple[str, bool]:
    """(a failed run's error, whether it failed before any step started and not for a start time-out)."""
    started = bool(instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START))
    failures = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    event = failures[-1].dagster_event if failures else None
    data = getattr(event, "event_specific_data", None)
    reason = getattr(getattr(data, "failure_reason", None), "value", None)
    if getattr(data, "error", None) is not None:
        error = _first_line(data.error)
    else:
        engine_errors = [
            e.dagster_event.event_specific_data.error
            for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
            if e.dagster_event is not None and getattr(e.dagster_event.event_specific_data, "error", None) is not None
        ]
        if engine_errors:
            error = _first_line(engine_errors[-1])
        else:
            message = (event.message if event is not None else None) or "failed with no error recorded"
            error = message.strip().splitlines()[0]
    return error.replace(run.run_id, "<run>"), not started and reason != "START_TIMEOUT"


def run_error(instance: DagsterInstance, run_id: str) -> str | None:
    """Why a failed run failed, in one line: its first failed step's innermost error (an exception in the
    step's code), else the run's own failure (a dead worker, as run monitoring says); None for an unknown run."""
    run = instance.get_run_by_id(run_id)
    if run is None:
        return None
    steps = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    error = next(
        (
            getattr(e.dagster_event.event_specific_data, "error", None)
            for e in steps
            if e.dagster_event is not None and getattr(e.dagster_event.event_specific_data, "error", None) is not None
        ),
        None,
    )
    return _first_line(error) if error is not None else run_failure(instance, run)[0].replace("<run>", run_id)


class FailureWatch:
    """The experiment's failures since ``since`` (epoch seconds) that will repeat: :meth:`check` finds them."""

    def __init__(self, instance: DagsterInstance, experiment: str, since: float) -> None:
        self.instance = instance
        self.experiment = experiment
        self.since = since
        self._runs: dict[str, tuple[str, bool]] = {}
        self._next = 0.0

    def check(self) -> Failure | None:
        """The first failure seen :data:`REPEATS` times, at most every :data:`WATCH_EVERY_S`."""
        if time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + WATCH_EVERY_S
        return self._sensor_failure() or self._start_failure()

    def _sensor_failure(self) -> Failure | None:
        for state in self.instance.all_instigator_state():
            if state.instigator_name not in DRIVER_SENSORS:
                continue
            ticks = self.instance.get_ticks(state.instigator_origin_id, state.selector_id, after=self.since, limit=10)
            failed = [_first_line(t.error) for t in ticks if t.status.value == "FAILURE" and t.error]
            errors = Counter(error for error in failed if not OUTAGE.search(error))
            for error, count in errors.items():
                if count >= REPEATS:
                    return Failure(f"sensor {state.instigator_name}", error)
        return None

    def _start_failure(self) -> Failure | None:
        records = self.instance.get_run_records(
            filters=RunsFilter(
                statuses=[DagsterRunStatus.FAILURE],
                tags={EXPERIMENT_TAG: self.experiment},
                updated_after=datetime.fromtimestamp(self.since, tz=UTC),
            )
        )
        seen: dict[str, list[dg.DagsterRun]] = {}
        for record in records:
            run = record.dagster_run
            # Updated since is not failed since: Dagster tags a failed run later (its retry), and the tag moves
            # its update time; a failure from before this command is not one of its failures.
            if (record.end_time or record.create_timestamp.timestamp()) < self.since:
                continue
            if run.run_id not in self._runs:
                self._runs[run.run_id] = run_failure(self.instance, run)
            error, at_start = self._runs[run.run_id]
            if at_start and not OUTAGE.search(error):
                seen.setdefault(error, []).append(run)
        for error, runs in seen.items():
            if len(runs) >= REPEATS:
                run = runs[0]
                where = f"run {run.run_id} ({run.job_name} {run.tags.get(PARTITION_TAG, '')})".replace(" )", ")")
                return Failure(where, error.replace("<run>", run.run_id), run.run_id)
        return None


def last_failure(instance: DagsterInstance, experiment: str, job: str, partition_key: str) -> Failure | None:
    """The newest failed run of one unit, with its error: what a unit given up on shows."""
    records = instance.get_run_records(
        filters=RunsFilter(
            job_name=job,
            statuses=[DagsterRunStatus.FAILURE],
            tags={EXPERIMENT_TAG: experiment, PARTITION_TAG: partition_key},
        ),
        limit=1,
    )
    if not records:
        return None
    run = records[0].dagster_run
    error, _ = run_failure(instance, run)
    return Failure(f"run {run.run_id} ({job} {partition_key})", error.replace("<run>", run.run_id), run.run_id)
