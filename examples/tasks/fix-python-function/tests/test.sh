#!/bin/bash
# Harbor's verifier: imports the agent's stats.py from the working directory; reward 1 or 0.
mkdir -p /logs/verifier
if python3 /tests/test_stats.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
