"""``rl-assets report --html``: a finished reference experiment (and its re-scoring) as one self-contained page.

The page is written by the CLI, as a user runs it; the test decodes its
embedded images (real PNGs), and finds in it the numbers ``report --json``
gives: each line's per-step mean reward, the checks and the judge calls.
Without matplotlib the flag is refused on one line, before any work.

With ``RL_ASSETS_SCREENSHOTS=DIR`` the page's first image (the mean reward curves) is also saved as
``DIR/curves.png``, docs/guides/ui.md's picture of them, as ``tests/test_ui_browser.py`` saves its views.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.invariants import INVARIANTS
from rl_assets.views.results import experiment_result
from rl_assets_testkit.expectations import cli_args, run_cli

NAME = "pictured"
FIELDS = dict(steps=2, worlds=2, prompts=2, samples=1)
CONFIG = ExperimentConfig(name=NAME, **FIELDS)
RESCORED = "v2-efficiency"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SCREENSHOTS_ENV = "RL_ASSETS_SCREENSHOTS"


@pytest.fixture(scope="module")
def trained(home: Path) -> None:
    run_cli(home, "train", *cli_args(NAME, FIELDS), "--json")
    run_cli(home, "rescore", "--experiment", NAME, "--rubric", RESCORED, "--json")


def test_report_html_holds_the_curves_as_images_the_learning_tables_the_checks_and_the_evidence(home, trained, stores):
    page_file = home.parent / f"{NAME}.html"
    proc = run_cli(home, "report", "--experiment", NAME, "--audit", "--html", str(page_file))
    assert f"wrote {page_file}" in proc.stderr
    page = page_file.read_text(encoding="utf-8")

    images = re.findall(r"<img alt='([^']+)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'>", page)
    assert [alt for alt, _ in images] == ["mean reward", "pass rate (verifier)", "mean turns"], "no tokens: reference"
    for _, encoded in images:
        png = base64.b64decode(encoded)
        assert png.startswith(PNG_SIGNATURE)
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")  # the IHDR chunk
        assert (width, height) == (640, 360)
    assert "src='http" not in page and "<script" not in page, "self-contained"
    if directory := os.environ.get(SCREENSHOTS_ENV):
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / "curves.png").write_bytes(base64.b64decode(images[0][1]))

    report = json.loads(run_cli(home, "report", "--experiment", NAME, "--json").stdout)
    lines = [
        ("v1", report["learning"]["steps"]),
        (RESCORED, experiment_result(stores, CONFIG.scored_with(RESCORED))["steps"]),
    ]
    for rubric, steps in lines:
        table = page.split(f"<h3>{NAME} ({rubric})</h3>", 1)[1].split("</table>", 1)[0]
        assert len(steps) == FIELDS["steps"]
        for step in steps:
            assert f"<td>{step['step']}</td><td>{step['trials_ok']}</td><td>{step['mean_reward']:.3f}</td>" in table

    for invariant in INVARIANTS:
        assert f"<td>{invariant.name}</td><td>{invariant.asset}</td>" in page
    assert "FAILED" not in page
    judge_calls = report["judge_calls"]["calls"]
    assert judge_calls == 2 * FIELDS["steps"] * FIELDS["prompts"] and f"judge calls   {judge_calls} for" in page


def test_report_html_without_matplotlib_is_refused_before_any_work(home, tmp_path):
    blocker = tmp_path / "matplotlib"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib is not installed here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    page_file = tmp_path / "page.html"
    proc = subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", "report", "--experiment", NAME, "--html", str(page_file)]
        + ["--home", str(home)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("pip install 'rl-assets[report]'"), proc.stderr
    assert not page_file.exists()
