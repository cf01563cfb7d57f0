"""Scripted model answers that solve each task of ``examples/tasks`` and ``examples/container-tasks`` through the
chat agent's tools.

For the stand-in model server (:mod:`rl_assets_testkit.model_server`): each task's answers are chosen by
a substring of its instruction, so every trial of a task, on any attempt, gets the same answers.
``python -m rl_assets_testkit.example_solutions`` prints the script, to try task experiments without a model.
"""

from __future__ import annotations

import json
from typing import Any

POLICY_MODEL = "policy"
JUDGE_MODEL = "judge"
FIXED_STATS = """\"\"\"Small statistics helpers.\"\"\"


def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
"""
SLUG = 'import re\n\n\ndef slugify(text):\n    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")\n'
EDIT_CONFIG = (
    'python3 -c \'import json; c = json.load(open("config.json")); c["server"]["port"] = 9090; '
    'c["server"]["debug"] = False; json.dump(c, open("config.json", "w"), indent=2)\''
)


def call(name: str, **arguments: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


SOLUTIONS: dict[str, list[dict[str, Any]]] = {
    "create-file": [
        call("write_file", path="greeting.txt", content="Hello, Harbor!\nTasks are directories.\n"),
        {"content": "Created greeting.txt."},
    ],
    "edit-config": [
        call("read_file", path="config.json"),
        call("bash", command=EDIT_CONFIG),
        {"content": "Port 9090, debug off."},
    ],
    "fix-python-function": [
        call("read_file", path="stats.py"),
        call("write_file", path="stats.py", content=FIXED_STATS),
        call("bash", command="python3 -c 'from stats import median; print(median([3, 1, 2]), median([4, 1, 3, 2]))'"),
        {"content": "median fixed."},
    ],
    "hidden-test": [
        call("write_file", path="slug.py", content=SLUG),
        call("bash", command="python3 -c 'from slug import slugify; print(slugify(\"Hello, World!\"))'"),
        {"content": "slug.py written."},
    ],
}
JQ_TOTALS = (
    "jq -r 'group_by(.customer) | map([.[0].customer, (map(.amount) | add)]) | sort_by(.[0]) | .[] | @tsv' "
    "/data/orders.json > /app/totals.tsv"
)
STOCK_TOTAL = (
    "curl -fsS http://inventory:8000/stock.json | grep -o '\"count\": *[0-9]*' | grep -o '[0-9]*$' "
    "| awk '{ total += $1 } END { print total }' > /app/total.txt"
)
GREETER_CONF = "[greeter]\nport = 8088\ngreeting = hello from rl-assets\n"
CONTAINER_SOLUTIONS = [
    {
        "match": "computes summary statistics",
        "turns": [call("write_file", path="src/stats/__init__.py", content=FIXED_STATS), {"content": "median fixed."}],
    },
    {
        "match": "reads its settings from",
        "turns": [call("write_file", path="/etc/greeter.conf", content=GREETER_CONF), {"content": "configured."}],
    },
    {"match": "lists orders", "turns": [call("bash", command=JQ_TOTALS), {"content": "totals written."}]},
    {"match": "named `inventory`", "turns": [call("bash", command=STOCK_TOTAL), {"content": "total written."}]},
]
"""The answers that solve ``examples/container-tasks``, each chosen by a substring of its instruction."""
MATCHES = {
    "create-file": "greeting.txt",
    "edit-config": "config.json",
    "fix-python-function": "stats.py",
    "hidden-test": "slug.py",
}


JUDGE_SCORES = {"create-file": 1.0, "edit-config": 0.5, "fix-python-function": 0.75, "hidden-test": 0.25}
"""What the scripted judge answers for each task under any rubric but a ``STRICT`` one (which gives 0)."""
STRICT_MARKER = "STRICT"


def script(faults: dict[str, Any] | None = None, extra: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """Answers that solve every example task, and a judge's scores for each."""
    tasks = [{"match": MATCHES[name], "turns": turns} for name, turns in SOLUTIONS.items()]
    judge = [{"match": STRICT_MARKER, "answer": '{"score": 0, "reason": "strict"}'}] + [
        {"match": MATCHES[name], "answer": f'{{"score": {score}, "reason": "scripted"}}'}
        for name, score in JUDGE_SCORES.items()
    ]
    return {
        "policy_model": POLICY_MODEL,
        "judge_model": JUDGE_MODEL,
        "tasks": [*extra, *tasks, *CONTAINER_SOLUTIONS],
        "judge": judge,
        "faults": faults or {},
    }


if __name__ == "__main__":
    print(json.dumps(script(), indent=2))
