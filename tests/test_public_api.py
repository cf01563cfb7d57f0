"""The package root: the curated names users import, each loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import rl_assets


def test_every_exported_name_resolves_and_is_listed():
    for name in rl_assets.__all__:
        assert getattr(rl_assets, name) is not None, name
    assert set(rl_assets.__all__) <= set(dir(rl_assets))


def test_importing_the_root_loads_no_framework():
    """The CLI's refusals and the sandbox (which sees ``rl_assets/__init__.py``) import the root; it stays cheap."""
    code = "import sys, rl_assets; print(sorted(m for m in ('dagster', 'ray', 'pydantic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error():
    try:
        rl_assets.NoSuchThing  # noqa: B018
    except AttributeError as err:
        assert "NoSuchThing" in str(err)
    else:
        raise AssertionError("an unknown name resolved")
