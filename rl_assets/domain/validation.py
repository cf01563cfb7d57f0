"""A pydantic validation error in the words a person reads.

Every door that refuses bad input (the CLI's flags, the launchpad's config, a rubric file, a task's
``task.toml``, the settings) shows pydantic's message for the field at fault. For a check written as a
validator that raises ``ValueError``, pydantic prefixes the message with ``"Value error, "``: an
implementation detail of how the check was written, which the refusal drops, here, for all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_VALIDATOR_PREFIX = "Value error, "


def in_words(error: Mapping[str, Any]) -> str:
    """The message of one of ``ValidationError.errors()``, without the validator's prefix."""
    return str(error["msg"]).removeprefix(_VALIDATOR_PREFIX)
