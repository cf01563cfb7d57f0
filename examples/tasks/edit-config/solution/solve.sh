#!/bin/bash
python3 - <<'PY'
import json

with open("config.json") as f:
    config = json.load(f)
config["server"]["port"] = 9090
config["server"]["debug"] = False
with open("config.json", "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
PY
