#!/bin/bash
# Graded: the share of the agent's final answer (/logs/agent/answer.txt) that keeps the rule, 0 to 1.
mkdir -p /logs/verifier
python3 - <<'PY'
import json
from pathlib import Path

answer = Path("/logs/agent/answer.txt").read_text(encoding="utf-8", errors="replace")
keep = sum(1 for c in answer if '0' <= c <= '9')
reward = round(keep / len(answer), 6) if answer else 0.0
Path("/logs/verifier/reward.json").write_text(json.dumps({"reward": reward, "characters": len(answer)}))
print(f"{keep} of {len(answer)} characters keep the rule: reward {reward}")
PY
