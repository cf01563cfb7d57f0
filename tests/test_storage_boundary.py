"""The storage boundary: SQL is written only in ``rl_assets/stores/`` (and the superuser's bootstrap).

Scanning string literals, not text, keeps docstrings that merely mention a
table from tripping it while catching any statement an ``execute`` could run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import rl_assets

PACKAGE = Path(rl_assets.__file__).parent
ALLOWED = {PACKAGE / "stores", PACKAGE / "home" / "services" / "postgres.py"}
"""The stores, and the role and database bootstrap that runs as superuser before any store exists. (The kill tests'
auditor counts the ledgers' raw rows on purpose, but it is in the test kit, outside the package this scans.)"""

SQL = re.compile(
    r"\bSELECT\b.+\bFROM\b|\bSELECT\s+(pg_|1\b|count\()|\bINSERT\s+INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\b(CREATE|ALTER|DROP)\s+(UNIQUE\s+)?(TABLE|INDEX|DATABASE|SCHEMA)\b",
    re.DOTALL,
)


def _allowed(path: Path) -> bool:
    return any(path == allowed or allowed in path.parents for allowed in ALLOWED)


def _sql_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if SQL.search(node.value):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value.strip()[:60]!r}")
    return found


def test_the_scan_finds_sql():
    assert SQL.search("SELECT trial_id, count(*) FROM rl_generation_attempts WHERE experiment = %s")
    assert SQL.search("INSERT INTO rl_world_seals (world_id) VALUES (%s)")
    assert SQL.search("CREATE UNIQUE INDEX IF NOT EXISTS x ON t (c)")
    assert not SQL.search("select a rubric from the registry")


def test_no_sql_outside_the_stores():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if not _allowed(path) for hit in _sql_literals(path)]
    assert not found, "SQL outside rl_assets/stores/:\n" + "\n".join(found)
