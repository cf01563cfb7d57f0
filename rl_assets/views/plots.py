"""Learning curves as PNG images: one figure per metric, one line per experiment and rubric.

Matplotlib is an optional dependency (``pip install 'rl-assets[report]'``):
only ``rl-assets report --html`` draws, and :func:`require_matplotlib` lets it
refuse on one line before any work when the library is missing. Figures are
drawn with the Agg backend (no display, no GUI toolkit) and returned as bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

REPORT_EXTRA = "pip install 'rl-assets[report]'"


class MissingPlottingError(RuntimeError):
    """Matplotlib is not installed."""


def require_matplotlib() -> None:
    """Raise :class:`MissingPlottingError`, naming the install command, if matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise MissingPlottingError(f"drawing learning curves needs matplotlib ({err}); {REPORT_EXTRA}") from None


@dataclass(frozen=True)
class Line:
    """One curve: a label (experiment and rubric) and its ``(step, value)`` points."""

    label: str
    points: Sequence[tuple[int, float]]


def line_chart(title: str, ylabel: str, lines: Sequence[Line]) -> bytes:
    """A PNG of ``lines`` over training steps (integer ticks), with a legend."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(6.4, 3.6), dpi=100)  # a Figure, not pyplot: no global state, nothing to close
    axes = figure.subplots()
    for line in lines:
        steps, values = zip(*line.points, strict=True) if line.points else ((), ())
        axes.plot(steps, values, marker="o", label=line.label)
    axes.set_title(title)
    axes.set_xlabel("step")
    axes.set_ylabel(ylabel)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()
