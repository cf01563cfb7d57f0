"""``rl-assets report``: the evidence that faults changed nothing, from durable records.

Every figure comes from the ledgers (attempt logs, judge calls, training
ledger, driver attempts), never from a process's memory, so the report of an
experiment that survived crashes is as trustworthy as that of a clean one.
Judge calls are reported with what became of each (answered, timed out with
its late answer used, timeout, error, process died) and every extra call with
its cause. The learning table is read from the steps' summaries and the
counts are counted in Postgres, so a report costs the same at a million trials
as at ten. ``--audit`` adds the invariants, checked as the UI's asset checks
check them (:mod:`rl_assets.views.invariant_records`), on every recorded unit: that reads
every record of the experiment, and finds what was damaged since it was written.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.invariants import INVARIANTS
from rl_assets.home.layout import Home
from rl_assets.stores.home_stores import Stores
from rl_assets.views.invariant_records import experiment_checks
from rl_assets.views.results import experiment_result, format_table
from rl_assets.worlds.local import LocalWorlds

JUDGING_FAILURES = ("judge: ", "check: ")
"""The kinds of failure (``rl_trial_failures.phase``) that happen in judging; the others (``generate``, ``run``) in
the rollout or its runs."""


def evidence(stores: Stores, config: ExperimentConfig, audit: bool = False) -> dict[str, Any]:
    """The experiment's evidence from its ledgers and step summaries (a long history is counted in Postgres, never
    re-read); ``audit``: also every check on every recorded unit, which reads every record of the experiment."""
    name = config.name
    generation = stores.attempts.generation_tally(name)
    judging = stores.attempts.judging_tally(name)
    failed = stores.attempts.failed_trials(name)
    damage = stores.damage.history(f"{name}/", config.world_ids)
    result = experiment_result(stores, config)
    return {
        "experiment": name,
        "generate": {
            "succeeded_first_try": generation.succeeded_first_try,
            "retried": [t for t in generation.retried if t not in failed],
            "failed_for_good": sorted(t for t, why in failed.items() if not why.startswith(JUDGING_FAILURES)),
            "attempts": generation.attempts,
        },
        "judging": {
            "succeeded_first_try": judging.succeeded_first_try,
            "retried": [t for t in judging.retried if t not in failed],
            "failed_for_good": sorted(t for t, why in failed.items() if why.startswith(JUDGING_FAILURES)),
            "attempts": judging.attempts,
        },
        "judge_calls": stores.verdicts.billing(name),
        "repairs": [
            {
                "kind": d.kind,
                "unit": d.partition_key,
                "detail": d.detail,
                "repaired": d.repaired_at is not None,
            }
            for d in damage
        ],
        "train_steps": [
            {"step": s.step, "version": s.version, "actor_pid": s.actor_pid}
            for s in stores.training.steps(name, config.rubric)
        ],
        "driver_attempts": result["counts"]["driver_attempts"],
        "checks": [asdict(o) for o in experiment_checks(stores, config, _worlds(stores))] if audit else None,
        "learning": result,
        **({"cost": _cost(stores, config, result)} if "cost" in result else {}),
    }


def _worlds(stores: Stores) -> LocalWorlds:
    home = Home(stores.home)
    return LocalWorlds(home.worlds, home.forks, home.tasks)


def _cost(stores: Stores, config: ExperimentConfig, result: dict[str, Any]) -> dict[str, Any]:
    """A task experiment's bill: calls and tokens per role and model, what they cost, and what faults wasted."""
    return {
        **result["cost"],
        "models": [
            {
                "role": u.role,
                "model": u.model,
                "calls": u.calls,
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
            }
            for u in stores.model_calls.usage(config.name)
        ],  # fmt: skip
        "wasted_policy_calls": stores.model_calls.wasted_calls(config.name),
    }


def format_report(report: dict[str, Any]) -> str:
    g, j, c = report["generate"], report["judging"], report["judge_calls"]
    pids = sorted({s["actor_pid"] for s in report["train_steps"]})
    lines = [
        f"evidence for experiment {report['experiment']}",
        f"  generate      succeeded first try {g['succeeded_first_try']}, retried {len(g['retried'])}"
        f" ({', '.join(g['retried']) or '-'}), failed for good {len(g['failed_for_good'])}, attempts {g['attempts']}",
        f"  judging       succeeded first try {j['succeeded_first_try']}, retried {len(j['retried'])}"
        f" ({', '.join(j['retried']) or '-'}), failed for good {len(j['failed_for_good'])}, attempts {j['attempts']}",
        f"  judge calls   {c['calls']} for {c['verdicts']} verdicts (extra: {c['extra_calls']}"
        + "".join(f"; {cause}: {n}" for cause, n in c["extra_call_causes"].items())
        + ")",
        "  call outcomes " + "; ".join(f"{outcome}: {n}" for outcome, n in sorted(c["outcomes"].items())),
        f"  train steps   {len(report['train_steps'])}, actor pid(s) {', '.join(map(str, pids)) or '-'}",
        f"  driver        {report['driver_attempts']} attempt(s)",
        *(
            f"  repaired      {r['kind']} {r['unit']}: {r['detail']}" + ("" if r["repaired"] else " (repair pending)")
            for r in report["repairs"]
        ),
        *_cost_lines(report.get("cost")),
        *check_lines(report["checks"]),
        "",
        format_table(report["learning"]),
    ]
    return "\n".join(lines)


def _cost_lines(cost: dict[str, Any] | None) -> list[str]:
    if cost is None:
        return []
    unpriced = f" (no price for {', '.join(cost['unpriced_models'])})" if cost["unpriced_models"] else ""
    return [
        *(
            f"  {m['role']:<6} calls {m['calls']} to {m['model']}: {m['prompt_tokens']} prompt + "
            f"{m['completion_tokens']} completion tokens"
            for m in cost["models"]
        ),
        f"  cost          ${cost['usd']:.4f}{unpriced}; policy calls of attempts that produced nothing: "
        f"{cost['wasted_policy_calls']}",
    ]


NOT_AUDITED = "not run: `rl-assets report --audit` re-reads every record and checks every unit"


def check_lines(checks: list[dict[str, Any]] | None) -> list[str]:
    """Each check's count of units passed, then every failure with its unit, rubric and reason."""
    if checks is None:
        return [f"  checks        {NOT_AUDITED}"]
    lines = []
    for invariant in INVARIANTS:
        mine = [c for c in checks if c["check"] == invariant.name]
        passed = sum(c["passed"] for c in mine)
        outcome = "-" if not mine else "passed" if passed == len(mine) else "FAILED"
        lines.append(f"  check         {invariant.name:<16} {invariant.asset:<8} {passed}/{len(mine)} {outcome}")
    for c in checks:
        if not c["passed"]:
            rubric = f" ({c['rubric']})" if c["rubric"] else ""
            lines.append(f"  check failed  {c['check']} {c['unit']}{rubric}: {c['detail']}")
    return lines
