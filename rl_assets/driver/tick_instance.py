"""The Dagster instance a sensor tick reads: one per code-server process, not one per tick.

A tick's ``context.instance`` is built from the instance reference the daemon sent and disposed when the tick
ends: three storages, their engines and Postgres sessions, and Dagster's schema checks asked anew, for every
tick of every sensor (a tick every second or so while an experiment trains). The driver's sensors ask this module
instead: the first tick of a process builds the instance from the same reference, and later ticks with that
reference reuse it. A context built without a reference (a test's ``build_sensor_context(instance=...)``) gets
its own instance back.
"""

from __future__ import annotations

import threading

import dagster as dg

_built: list[tuple[object, dg.DagsterInstance]] = []
_building = threading.Lock()


def tick_instance(context: dg.SensorEvaluationContext) -> dg.DagsterInstance:
    """The process's instance for the reference ``context`` carries (``context.instance`` when it carries none)."""
    ref = context.instance_ref
    if ref is None:
        return context.instance
    with _building:
        for known, instance in _built:
            if known == ref:
                return instance
        instance = dg.DagsterInstance.from_ref(ref)
        _built.append((ref, instance))
        return instance
