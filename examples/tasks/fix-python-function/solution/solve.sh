#!/bin/bash
python3 - <<'PY'
import pathlib

path = pathlib.Path("stats.py")
fixed = '''def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
'''
text = path.read_text()
start = text.index("def median(values):")
path.write_text(text[:start] + fixed)
PY
