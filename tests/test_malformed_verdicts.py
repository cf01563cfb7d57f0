"""A judge that answers prose, as a small model behind a server without structured output does.

Its answers are billed (they were answered) and recorded as malformed verdicts, asked again only as often as
``--judge-malformed-retries`` says, and counted where the user looks: ``train``'s per-trial JSON and exit
code, ``report`` and ``show``. With ``--judge-failure verifier-only`` the verifier's reward stands, marked unjudged.
The stand-in refuses ``response_format`` (as a server without it does), so every verdict is asked by the
prompt alone after one refused request per process.
"""

from __future__ import annotations

import json
from pathlib import Path

from rl_assets_testkit.example_solutions import JUDGE_MODEL, POLICY_MODEL, script
from rl_assets_testkit.expectations import run_cli
from rl_assets_testkit.served_model import ServedModel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"
PROSE = "The agent did a good job and the files look right to me."
TASKS = 4


def _prose_judge() -> dict:
    return {**script(), "judge": [{"match": "", "answer": PROSE}], "strict": {"refused_fields": ["response_format"]}}


def _train(home: Path, name: str, server: ServedModel, *extra: str):
    return run_cli(
        home,
        *("train", "--experiment", name, "--tasks", str(EXAMPLES), "--policy-url", server.base_url),
        *("--policy-model", POLICY_MODEL, "--judge-url", server.base_url, "--judge-model", JUDGE_MODEL),
        *("--steps", "1", "--samples", "1", "--max-turns", "8", *extra, "--json"),
        check=False,
    )


def test_prose_verdicts_are_billed_once_each_and_a_step_they_all_fail_exits_non_zero(home, tmp_path):
    with ServedModel(_prose_judge(), tmp_path) as server:
        proc = _train(home, "prose-judge", server)
        judged = server.stats()["answered"][JUDGE_MODEL]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert judged == TASKS  # one call per trajectory: a malformed verdict is not asked again by default
    trials = json.loads(proc.stdout)["trials"]
    assert [t["failed"] for t in trials] == ["judge"] * TASKS
    assert all("holds no JSON verdict" in t["error"] and "\n" not in t["error"] for t in trials)
    assert f"step 0: every trial failed for good ({TASKS} x judge: the judge's answer holds no JSON" in proc.stderr
    report = run_cli(home, "report", "--experiment", "prose-judge").stdout
    assert f"judge calls   {TASKS} for {TASKS} verdicts (extra: 0)" in report
    assert f"call outcomes malformed verdict: {TASKS}" in report
    assert report.count("\nfailed s0-") == TASKS and "failed s0-create-file-n0: judge: the judge's answer" in report
    shown = run_cli(home, "show", "--experiment", "prose-judge", "s0-create-file-n0").stdout
    assert shown.startswith("trial s0-create-file-n0 of experiment prose-judge\nfailed for good: judge: the judge's")
    assert "calls `write_file`" in shown and "**verifier**: reward 1" in shown  # the transcript, in the terminal
    unknown = run_cli(home, "show", "--experiment", "prose-judge", "s1-create-file-n0", check=False)
    assert unknown.returncode == 2 and "no trial 's1-create-file-n0' in experiment prose-judge" in unknown.stderr


def test_malformed_verdicts_have_their_own_retries_and_verifier_only_keeps_the_verifiers_reward(home, tmp_path):
    with ServedModel(_prose_judge(), tmp_path) as server:
        retries = ("--judge-malformed-retries", "1", "--judge-failure", "verifier-only")
        proc = _train(home, "prose-verifier-only", server, *retries)
        judged = server.stats()["answered"][JUDGE_MODEL]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert judged == 2 * TASKS  # asked once again each, as the setting says, and no more
    result = json.loads(proc.stdout)
    trials = result["trials"]
    assert len(trials) == TASKS and all("failed" not in t for t in trials)
    assert all(t["reward"] == t["verifier_reward"] == 1.0 and t["judge_score"] is None for t in trials)
    assert all("holds no JSON verdict" in t["unjudged"] for t in trials)
    report = run_cli(home, "report", "--experiment", "prose-verifier-only").stdout
    assert f"judge calls   {2 * TASKS} for {TASKS} verdicts (extra: {TASKS}; malformed verdict: {TASKS})" in report
    assert f"call outcomes malformed verdict: {2 * TASKS}" in report
