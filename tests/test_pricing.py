"""Pricing: USD per million tokens, from a file; an unpriced model costs 0 and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rl_assets.domain.transcripts import Usage
from rl_assets.workloads.harbor.pricing import Cost, ModelPrice, PriceTable

TABLE = PriceTable(models={"big": ModelPrice(prompt_usd_per_mtok=2.0, completion_usd_per_mtok=8.0)})


def test_the_cost_of_a_usage_is_both_sides_priced_per_million() -> None:
    cost = TABLE.cost("big", Usage(prompt_tokens=1_500_000, completion_tokens=250_000))
    assert cost.priced and cost.usd == pytest.approx(1.5 * 2.0 + 0.25 * 8.0)
    assert TABLE.cost("big", Usage()) == Cost(usd=0.0, priced=True)


def test_an_unknown_model_costs_nothing_and_says_it_is_unpriced() -> None:
    assert TABLE.cost("small", Usage(prompt_tokens=10, completion_tokens=10)) == Cost(usd=0.0, priced=False)


def test_a_price_table_loads_from_toml_or_json(tmp_path: Path) -> None:
    toml = tmp_path / "prices.toml"
    toml.write_text('[models."big"]\nprompt_usd_per_mtok = 2.0\ncompletion_usd_per_mtok = 8.0\n')
    js = tmp_path / "prices.json"
    js.write_text(json.dumps(TABLE.model_dump()))
    assert PriceTable.load(toml) == PriceTable.load(js) == TABLE


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_a_price_must_be_a_finite_non_negative_number(bad: float) -> None:
    with pytest.raises(ValidationError):
        ModelPrice(prompt_usd_per_mtok=bad, completion_usd_per_mtok=1.0)
