"""The rubric registry: bad rubrics are refused with a clear message and change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_assets.stores.rubrics import RubricError, RubricRegistry
from rl_assets_testkit.expectations import run_cli

GOOD = {"name": "strict", "correctness_weight": 1.0, "efficiency_weight": 0.8, "tidiness_weight": 0.2}


def _file(tmp_path: Path, body: dict | str, name: str | None = None) -> Path:
    path = tmp_path / f"{name or (body['name'] if isinstance(body, dict) else 'raw')}.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


@pytest.mark.parametrize(
    "body, message",
    [
        ({k: v for k, v in GOOD.items() if k != "tidiness_weight"}, "tidiness_weight: Field required"),
        ({**GOOD, "efficiency_weight": -0.5}, "efficiency_weight: Input should be greater than or equal to 0"),
        ({**GOOD, "correctness_weight": "high"}, "correctness_weight: Input should be a valid number"),
        ({**GOOD, "correctness_weight": True}, "correctness_weight: Input should be a valid number"),
        ({**GOOD, "name": "v1"}, "'v1' is a built-in rubric with other weights"),
        ("{not json", "raw.json: not JSON (Expecting property name enclosed in double quotes at line 1, column 2)"),
    ],
)
def test_bad_rubric_is_refused_and_changes_nothing(home, tmp_path, body, message):
    before = sorted((home / "rubrics").glob("*")) if (home / "rubrics").exists() else []
    proc = run_cli(home, "rubrics", "--add", str(_file(tmp_path, body)), check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert (sorted((home / "rubrics").glob("*")) if (home / "rubrics").exists() else []) == before


def test_a_name_stands_for_one_rubric_forever(home, tmp_path, stores):
    added = run_cli(home, "rubrics", "--add", str(_file(tmp_path, GOOD)))
    assert "strict" in added.stdout
    other = tmp_path / "other"
    other.mkdir()
    changed = _file(other, {**GOOD, "efficiency_weight": 0.1})
    proc = run_cli(home, "rubrics", "--add", str(changed), check=False)
    assert proc.returncode == 2 and "a different rubric named 'strict' is already registered" in proc.stderr
    assert json.loads((home / "rubrics" / "strict.json").read_text()) == GOOD

    # Edited in place behind the registry's back: the pinned hash refuses it.
    (home / "rubrics" / "strict.json").write_text(changed.read_text())
    with pytest.raises(RubricError, match="give the changed rubric a new name"):
        stores.rubrics.get("strict")
    proc = run_cli(home, "rescore", "--experiment", "any", "--rubric", "strict", check=False)
    assert proc.returncode == 2 and "give the changed rubric a new name" in proc.stderr
    (home / "rubrics" / "strict.json").write_text(json.dumps(GOOD))
    assert stores.rubrics.get("strict").efficiency_weight == 0.8
    # Confirmed once, the pin is not asked again; an edit after that is still refused.
    (home / "rubrics" / "strict.json").write_text(changed.read_text())
    with pytest.raises(RubricError, match="give the changed rubric a new name"):
        stores.rubrics.get("strict")


def test_a_confirmed_pin_is_not_asked_again(home, stores):
    """A run's trials each look their rubric up: the database confirms its pin once per registry."""
    asked = []

    class Counting:
        def transaction(self):
            asked.append(1)
            return stores.db.transaction()

    registry = RubricRegistry(home / "rubrics", Counting())
    for _ in range(5):
        assert registry.get("v1").name == "v1"
    assert len(asked) == 1


def test_file_must_be_named_after_its_rubric(home, tmp_path):
    proc = run_cli(home, "rubrics", "--add", str(_file(tmp_path, GOOD, name="misnamed")), check=False)
    assert proc.returncode == 2 and "must be named after its rubric (strict.json)" in proc.stderr
