"""What a background service of the home inherits from the command that starts it: no credentials.

A service (the daemon, the UI, the policy server) outlives the command that
started it and serves every later one, so whatever it inherits is shared by
experiments that never chose it. API keys are the experiments' own, read from
the home when used (:mod:`rl_assets.home.services.api_keys`); the caller's are
dropped here, so no run can use a key left behind by whoever started the
daemon. The home's own connection settings (``DAGSTER_PG_*``) are kept: every
process of the home needs them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from rl_assets.home.layout import Home

CALLER_CREDENTIAL = re.compile(r"API_KEY|ACCESS_KEY|SECRET|(^|_)TOKEN$")
"""Variables that hold a caller's credentials for some API (``OPENAI_API_KEY``, ``HF_TOKEN``, ...)."""


def without_credentials(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` less every variable :data:`CALLER_CREDENTIAL` matches."""
    return {k: v for k, v in environ.items() if not CALLER_CREDENTIAL.search(k)}


def service_environment(home: Home, name: str) -> dict[str, str]:
    """The environment of the home's service ``name``: ours without credentials, its own private temp folder."""
    return {**without_credentials(os.environ), **home.private_tmp_env(name)}
