"""What model calls cost: per-model prices in USD per million prompt and completion tokens.

Prices change and differ by provider, so they are configuration (a TOML or JSON file, or a dict),
never constants in code. A model with no price costs 0 *and says so* (``priced=False``): a bill that
silently counted unpriced calls as free would look cheaper than it was.

A price file maps served model names to prices::

    [models."gpt-4.1-mini"]
    prompt_usd_per_mtok = 0.40
    completion_usd_per_mtok = 1.60
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rl_assets.domain.transcripts import Usage

PER = 1_000_000


class ModelPrice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_usd_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    completion_usd_per_mtok: float = Field(ge=0, allow_inf_nan=False)


class Cost(BaseModel):
    """The cost of some usage; ``priced`` is False when the model had no price (and ``usd`` is then 0)."""

    model_config = ConfigDict(frozen=True)

    usd: float
    priced: bool


class PriceTable(BaseModel):
    """Prices by served model name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: dict[str, ModelPrice] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> PriceTable:
        """The table in ``path``: TOML for ``.toml``, else JSON."""
        text = path.read_text(encoding="utf-8")
        return cls.model_validate(tomllib.loads(text) if path.suffix == ".toml" else json.loads(text))

    def cost(self, model: str, usage: Usage) -> Cost:
        """What ``usage`` of ``model`` cost."""
        price = self.models.get(model)
        if price is None:
            return Cost(usd=0.0, priced=False)
        usd = (
            usage.prompt_tokens * price.prompt_usd_per_mtok + usage.completion_tokens * price.completion_usd_per_mtok
        ) / PER
        return Cost(usd=usd, priced=True)
