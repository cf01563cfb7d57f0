"""MkDocs hook: the reference pages are generated from the code at build time, so they cannot drift from it.

``reference/cli.md`` gets every command's ``--help`` (from :func:`rl_assets.cli.commands.build_parser`), and
``reference/settings.md`` a table of every experiment, fault and execution setting (from the pydantic models'
field descriptions, as the flags and the launchpad's config are) and one of every environment variable (from
:class:`rl_assets.home.settings.Settings`, the one model the package reads them through).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

GENERATED = "<!-- generated -->"
ENVIRONMENT = "<!-- generated: environment -->"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def _help_pages(prog: str, parser: argparse.ArgumentParser) -> list[str]:
    """``prog``'s help, then each of its subcommands' (an alias of one already shown is skipped)."""
    parts = [f"## {prog}\n\n```text\n{parser.format_help()}```\n"]
    seen: set[int] = set()
    for name, command in _subcommands(parser).items():
        if id(command) not in seen:
            seen.add(id(command))
            parts += _help_pages(f"{prog} {name}", command)
    return parts


def _commands() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps help to the terminal: a fixed width gives the same page anywhere
    from rl_assets.cli.commands import build_parser

    return "\n".join(_help_pages("rl-assets", build_parser()))


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _settings() -> str:
    from pydantic_core import PydanticUndefined

    from rl_assets.cli.commands import TRAIN_FLAGS

    rows = ["| flag | setting | default | what it is |", "| --- | --- | --- | --- |"]
    for flag in TRAIN_FLAGS:
        info = flag.model.model_fields[flag.field]
        default = "required" if info.default is PydanticUndefined else f"`{info.default!r}`"
        where = f"`{flag.model.__name__}.{flag.field}`"
        rows.append(f"| `{flag.flag}` | {where} | {default} | {_cell(info.description or '')} |")
    return "\n".join(rows) + "\n"


def _environment() -> str:
    from rl_assets.home.settings import Settings

    rows = ["| variable | default | what it is |", "| --- | --- | --- |"]
    for info in Settings.model_fields.values():
        default = "unset" if info.default in (None, ()) else f"`{info.default}`"
        rows.append(f"| `{info.alias}` | {default} | {_cell(info.description or '')} |")
    return "\n".join(rows) + "\n"


PAGES: dict[str, dict[str, Callable[[], str]]] = {
    "reference/cli.md": {GENERATED: _commands},
    "reference/settings.md": {GENERATED: _settings, ENVIRONMENT: _environment},
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for marker, generate in PAGES.get(page.file.src_uri, {}).items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown
