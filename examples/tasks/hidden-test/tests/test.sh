#!/bin/bash
# Harbor's verifier: /tests is copied in only after the agent, so these cases were never visible.
mkdir -p /logs/verifier
if python3 /tests/test_slug.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
