#!/bin/bash
# Harbor's verifier: runs in the working directory once the agent is done; reward 1 or 0.
mkdir -p /logs/verifier
if printf 'Hello, Harbor!\nTasks are directories.\n' | cmp -s - greeting.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
