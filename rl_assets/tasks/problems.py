"""A ``task.toml`` validation error as one line naming the file, the table and the key.

Pydantic locates an error by a path through the model (``('verifier', 'timeout_sec')``, with the
members of a union such as ``'str'`` or ``'ArtifactConfig'`` mixed in); a task author thinks in TOML
tables and keys. The path is walked through the parsed TOML itself, so only what exists in the file
is named; of a union's alternatives only those of the value's shape (a table or not) are reported.
A value is shown only when it is the offending scalar, cut short: never a table or a list, so
nothing else of the file is echoed.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from rl_assets.domain.names import shown
from rl_assets.domain.validation import in_words

_TABLE_ERRORS = {"model_type", "dict_type", "model_attributes_type"}
_UNION_MEMBER = re.compile(r"^(str|int|float|bool|list\[.*\]|dict\[.*\]|function-[a-z]+\[.*\]|[A-Z][A-Za-z]+)$")
"""How pydantic names a union's member in an error path (a bounded number: ``function-after[...]``); Harbor's
keys are all lowercase snake case."""


def _walk(data: Any, loc: tuple[int | str, ...]) -> tuple[list[str], Any, bool, str | None]:
    """The path's TOML parts, the value there, whether the file has it, and the union member tried."""
    parts: list[str] = []
    value: Any = data
    found = True
    member = None
    for part in loc:
        if isinstance(part, int) and isinstance(value, list) and part < len(value):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{part}]"]
            value = value[part]
        elif isinstance(part, str) and isinstance(value, dict) and part in value:
            parts.append(part)
            value = value[part]
        elif isinstance(part, str) and _UNION_MEMBER.match(part):
            member = part
        elif isinstance(part, str):  # a key the file lacks (a missing field)
            parts.append(part)
            value, found = None, False
    return parts, value, found, member


def _fits(member: str, value: Any) -> bool:
    """Whether a union member is the one meant for a value of this shape (a table or not)."""
    is_table_member = member[0].isupper() or member.startswith("dict[")
    return is_table_member == isinstance(value, dict)


def describe(where: str, data: dict[str, Any], error: ValidationError) -> list[str]:
    """One line per problem: ``FILE: [table] key: message (got VALUE)``."""
    found_at: dict[str, tuple[list[str], Any]] = {}
    for problem in error.errors():
        loc = tuple(problem["loc"])
        parts, value, found, member = _walk(data, loc)
        _, at_member, _, _ = _walk(data, loc[: loc.index(member)]) if member else (None, value, None, None)
        if member and not _fits(member, at_member) and any(_fits(m, at_member) for m in _members(error, loc, member)):
            continue  # an alternative of the union not meant for this shape of value
        kind = problem["type"]
        message = in_words(problem)
        if kind == "extra_forbidden":
            message = "not a key of Harbor's task.toml schema"
        elif kind in _TABLE_ERRORS:
            message = "must be a table"
        if isinstance(value, dict) and kind not in _TABLE_ERRORS:  # a problem of the table as a whole
            place = f"[{'.'.join(parts)}]" if parts else "(top level)"
        elif len(parts) > 1:
            place = f"[{'.'.join(parts[:-1])}] {parts[-1]}"
        else:
            place = parts[0] if parts else "(top level)"
        shows_value = found and kind != "extra_forbidden" and not isinstance(value, dict | list)
        messages, _ = found_at.setdefault(place, ([], f" (got {shown(value)})" if shows_value else ""))
        if message not in messages:
            messages.append(message)
    return [f"{where}: {place}: {', or '.join(messages)}{got}" for place, (messages, got) in found_at.items()]


def _members(error: ValidationError, loc: tuple[int | str, ...], member: str) -> list[str]:
    """The union members tried at the same place as ``loc``'s member."""
    prefix = loc[: loc.index(member)]
    tried = []
    for problem in error.errors():
        other = tuple(problem["loc"])
        if other[: len(prefix)] == prefix and len(other) > len(prefix) and isinstance(other[len(prefix)], str):
            tried.append(other[len(prefix)])
    return [m for m in tried if _UNION_MEMBER.match(m)]
