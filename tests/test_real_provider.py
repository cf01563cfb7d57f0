"""Opt-in: one task trained against a real OpenAI-compatible server (vLLM, SGLang, a hosted API).

Set ``RL_ASSETS_POLICY_URL`` (a base URL ending in ``/v1``) and ``RL_ASSETS_POLICY_MODEL`` (and
``RL_ASSETS_POLICY_API_KEY`` if the server wants one) to run it; CI has no model server, so there it
is skipped, saying why. It checks the plumbing, not the model: the run finishes, every trial has a
verifier reward, and the calls the server answered are in the cost ledger.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rl_assets_testkit.expectations import train_json

URL = os.environ.get("RL_ASSETS_POLICY_URL")
MODEL = os.environ.get("RL_ASSETS_POLICY_MODEL")
TASK = Path(__file__).resolve().parents[1] / "examples" / "tasks" / "create-file"


@pytest.mark.skipif(not (URL and MODEL), reason="set RL_ASSETS_POLICY_URL and RL_ASSETS_POLICY_MODEL to run it")
def test_a_task_against_a_real_model_server(home):
    result = train_json(
        home,
        *("--experiment", "real-provider", "--tasks", str(TASK), "--policy-url", str(URL)),
        *("--policy-model", str(MODEL), "--steps", "1", "--samples", "1", "--max-turns", "10"),
    )
    (trial,) = result["trials"]
    assert trial["verifier_reward"] in (0.0, 1.0)
    assert result["counts"]["policy_calls"] == trial["turns"] >= 1
    assert result["cost"]["policy_prompt_tokens"] > 0
