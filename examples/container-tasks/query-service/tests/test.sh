#!/bin/bash
# Reward 1 if /app/total.txt holds the stock's total (120 + 75 + 42).
mkdir -p /logs/verifier
if [ "$(tr -d ' \n' < /app/total.txt 2>/dev/null)" = "237" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
