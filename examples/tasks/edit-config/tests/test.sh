#!/bin/bash
# Harbor's verifier: checks config.json in the working directory; writes reward.json.
mkdir -p /logs/verifier
if python3 /tests/check_config.py; then
  echo '{"reward": 1.0}' > /logs/verifier/reward.json
else
  echo '{"reward": 0.0}' > /logs/verifier/reward.json
fi
