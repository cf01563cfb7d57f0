"""The documentation site builds with ``--strict`` (a broken link, a missing page or a nav entry without a file
fails it), and its reference pages are generated from the code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rl_assets.home.settings import VARIABLES

ROOT = Path(__file__).resolve().parent.parent


def test_the_docs_site_builds_strictly_with_the_generated_reference(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "rl-assets train" in cli and "--max-concurrent-trials" in cli and "rl-assets keys set" in cli
    settings = (site / "reference" / "settings" / "index.html").read_text()
    assert "ExecutionSettings.max_concurrent_trials" in settings and "<!-- generated" not in settings
    missing = [variable for variable in VARIABLES if f"<code>{variable}</code>" not in settings]
    assert not missing, f"every environment variable of rl_assets.home.settings is on the page: {missing}"
    spec = (site / "reference-workload" / "index.html").read_text()
    assert "seed(*parts)" in spec, "the specification the code cites is in the docs"
    assert "kind" in (site / "kubernetes" / "index.html").read_text(), "deploy/README.md is rendered"


def test_the_readme_stays_a_front_page():
    size = (ROOT / "README.md").stat().st_size
    assert size < 12_000, f"README.md is {size} bytes: the details belong in docs/"
