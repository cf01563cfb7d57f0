#!/bin/bash
set -euo pipefail
curl -fsS http://inventory:8000/stock.json | grep -o '"count": *[0-9]*' | grep -o '[0-9]*$' \
  | awk '{ total += $1 } END { print total }' > /app/total.txt
