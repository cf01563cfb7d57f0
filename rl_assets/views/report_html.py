"""``rl-assets report --html FILE``: one self-contained page a person can keep, share and compare.

The page holds the learning curves as embedded PNG images (no file beside
it, no script, nothing fetched), one line per experiment and rubric: the
experiment under each rubric it was trained with (its own and every
re-scoring) and the experiments it was forked from, so a fork is seen against
its parent. Per step: mean reward, pass rate (the share of the batch the
verifier passed: the reference agent's secret found and answered, a task's
verifier reward 1), mean turns, and for task experiments the tokens and cost
of the step's model calls. Below them: each line's learning table, the
checks (with ``--audit``), and the evidence and costs exactly as ``rl-assets report`` prints
them. Everything is read from durable records (the curves from the steps' summaries), as the report is.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.invariants import INVARIANTS
from rl_assets.stores.home_stores import Stores
from rl_assets.views.plots import Line, line_chart
from rl_assets.views.report import NOT_AUDITED, format_report
from rl_assets.views.results import cost_of, prices, step_summaries


@dataclass(frozen=True)
class StepPoint:
    """One step of one line: what the curves plot."""

    step: int
    trials: int
    mean_reward: float | None
    pass_rate: float | None
    mean_turns: float | None
    version: int
    tokens: int | None
    usd: float | None


@dataclass(frozen=True)
class Curve:
    experiment: str
    rubric: str
    points: list[StepPoint]

    @property
    def label(self) -> str:
        return f"{self.experiment} ({self.rubric})"


def _points(stores: Stores, config: ExperimentConfig) -> list[StepPoint]:
    """Each trained step of ``config``'s chain; tokens and cost only where model calls are recorded (tasks)."""
    table = prices(stores.home) if config.tasks is not None else None
    points = []
    for applied, summary in step_summaries(stores, config):
        usage = stores.model_calls.usage(config.name, applied.step) if table is not None else []
        n, verified = summary.trials_ok, summary.trials_verified
        points.append(
            StepPoint(
                step=applied.step,
                trials=n,
                mean_reward=summary.mean_reward,
                pass_rate=round(verified / n, 3) if n and verified is not None else None,
                mean_turns=summary.mean_turns,
                version=applied.version,
                tokens=sum(u.prompt_tokens + u.completion_tokens for u in usage) if table is not None else None,
                usd=cost_of(usage, table)["usd"] if table is not None else None,
            )
        )
    return points


def curves(stores: Stores, config: ExperimentConfig) -> list[Curve]:
    """One curve per (experiment, rubric): ``config``'s own chains, then those of the experiments it forks."""
    found = []
    for name in [config.name, *stores.experiments.ancestors(config.name)]:
        experiment = stores.experiments.get(name)
        for rubric in stores.training.rubrics(name):
            found.append(Curve(name, rubric, _points(stores, experiment.scored_with(rubric))))
    return found


METRICS: list[tuple[str, str, Callable[[StepPoint], float | None]]] = [
    ("mean reward", "reward", lambda p: p.mean_reward),
    ("pass rate (verifier)", "share of trials", lambda p: p.pass_rate),
    ("mean turns", "turns", lambda p: p.mean_turns),
    ("tokens per step (policy and judge)", "tokens", lambda p: p.tokens),
    ("cost per step", "USD", lambda p: p.usd),
]


def charts(found: list[Curve]) -> list[tuple[str, bytes]]:
    """``(title, PNG)`` for each metric some line has values for."""
    out = []
    for title, ylabel, value in METRICS:
        lines = [Line(c.label, [(p.step, v) for p in c.points if (v := value(p)) is not None]) for c in found]
        lines = [line for line in lines if line.points]
        if lines:
            out.append((title, line_chart(title, ylabel, lines)))
    return out


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _usd(value: float | None) -> str | None:
    return None if value is None else f"{value:.4f}"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _checks_table(checks: list[dict[str, Any]] | None) -> str:
    if checks is None:
        return f"<p>{html.escape(NOT_AUDITED)}</p>"
    rows = []
    for invariant in INVARIANTS:
        mine = [c for c in checks if c["check"] == invariant.name]
        passed = sum(c["passed"] for c in mine)
        failures = "; ".join(f"{c['unit']}: {c['detail']}" for c in mine if not c["passed"])
        outcome = "-" if not mine else "passed" if passed == len(mine) else "FAILED"
        rows.append([invariant.name, invariant.asset, f"{passed}/{len(mine)}", outcome, failures or "-"])
    return _table(["check", "asset", "passed", "outcome", "failures"], rows)


STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
img { display: block; margin: 0.5em 0 1.5em; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; }
"""


def render(report: dict[str, Any], found: list[Curve]) -> str:
    """The page for ``report`` (:func:`rl_assets.views.report.evidence`) and its curves."""
    name = html.escape(report["experiment"])
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>rl-assets report: {name}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Experiment {name}</h1>",
        "<h2>Learning curves</h2>",
    ]
    for title, png in charts(found):
        encoded = base64.b64encode(png).decode("ascii")
        parts.append(
            f"<h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' src='data:image/png;base64,{encoded}'>"
        )
    parts.append("<h2>Per step</h2>")
    for curve in found:
        parts.append(f"<h3>{html.escape(curve.label)}</h3>")
        parts.append(
            _table(
                ["step", "trials", "mean reward", "pass rate", "mean turns", "version", "tokens", "cost (USD)"],
                [
                    [p.step, p.trials, p.mean_reward, p.pass_rate, p.mean_turns, p.version, p.tokens, _usd(p.usd)]
                    for p in curve.points
                ],
            )
        )
    parts.append("<h2>Checks</h2>")
    parts.append(_checks_table(report["checks"]))
    parts.append("<h2>Evidence and costs</h2>")
    parts.append(f"<pre>{html.escape(format_report(report))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)
