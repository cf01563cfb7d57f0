"""The rubric registry is observed by default, under the real ``dagster-daemon``.

Nothing is switched on: the daemon's first tick of ``rubric_observer`` records
the registry's version as the data version of ``rubrics``. An experiment is
trained against it; a new rubric is registered, the next tick records the new
version, and the experiment's rewards are stale because their rubric input
changed, while nothing makes its trajectories and worlds stale through the rubric. (Dagster's resolver does
not carry staleness across the weights' many-to-one partition mapping, so
weights are not asserted on.)
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.definitions.data_version import StaleStatus
from dagster._utils.test.data_versions import get_stale_status_resolver

from rl_assets.definitions import defs
from rl_assets.driver.rubric_observer import DATA_VERSION_TAG, OBSERVE_INTERVAL_S, last_observed_version
from rl_assets.home.layout import Home
from rl_assets.home.services.daemon import LocalDaemon
from rl_assets_testkit.expectations import cli_args, run_cli
from rl_assets_testkit.kills import wait_for

REPO = Path(__file__).resolve().parents[1]
NAME = "observed"
FIELDS = dict(steps=1, worlds=1, prompts=1, samples=1)
NEW_RUBRIC = {"name": "v4-observed", "correctness_weight": 1.0, "efficiency_weight": 0.1, "tidiness_weight": 0.0}


@pytest.fixture
def daemon(home: Path) -> int:
    """The home's own daemon (a second one would run a second driver and a second observer)."""
    return LocalDaemon(Home(home)).ensure_running()


def _wait_for_version(instance: dg.DagsterInstance, version: str, timeout: float) -> None:
    wait_for(lambda: last_observed_version(instance) == version, f"rubrics observed at {version}", timeout)


def _rubric_causes(resolver, key: str, partition) -> list:
    """The root causes of ``key``'s staleness that are the rubric registry's new version.

    Whether trajectories are FRESH depends on the rest of the shared home too: they depend on every world and
    task image, so another experiment's new world makes them stale. What a rubric change must not do is make
    them stale through itself.
    """
    causes = resolver.get_stale_root_causes(dg.AssetKey(key), partition)
    return [c for c in causes if dg.AssetKey("rubrics") in (c.key.asset_key, c.dependency and c.dependency.asset_key)]


def test_the_registry_is_observed_by_default_and_a_new_rubric_makes_rewards_stale(home, daemon, stores, instance):
    _wait_for_version(instance, stores.rubrics.version(), timeout=120)
    before = instance.fetch_observations(dg.AssetKey("rubrics"), limit=1).records[0].storage_id
    run_cli(home, "train", *cli_args(NAME, FIELDS), "--json")
    rubric_file = home.parent / f"{NEW_RUBRIC['name']}.json"
    rubric_file.write_text(json.dumps(NEW_RUBRIC))
    run_cli(home, "rubrics", "--add", str(rubric_file))

    _wait_for_version(instance, stores.rubrics.version(), timeout=OBSERVE_INTERVAL_S + 90)

    resolver = get_stale_status_resolver(instance, list(defs.assets))
    trial = dg.MultiPartitionKey({"step": f"{NAME}/s0", "trial": "p0-n0"})
    assert resolver.get_status(dg.AssetKey("rewards"), trial) == StaleStatus.STALE
    assert _rubric_causes(resolver, "rewards", trial), resolver.get_stale_root_causes(dg.AssetKey("rewards"), trial)
    assert not _rubric_causes(resolver, "trajectories", trial)
    assert not _rubric_causes(resolver, "worlds", "w0")
    ticks = instance.fetch_observations(dg.AssetKey("rubrics"), limit=100).records
    during = [r.asset_observation.tags[DATA_VERSION_TAG] for r in ticks if r.storage_id > before]
    assert during == [stores.rubrics.version()], "training observed nothing; the new rubric was observed once"
    versions = [r.asset_observation.tags[DATA_VERSION_TAG] for r in ticks]
    # Other tests of the shared home add and remove rubrics, so a version may come back; but each observation
    # records a change, even across the daemons that kill tests end mid-tick.
    repeats = [(a, b) for a, b in itertools.pairwise(versions) if a == b]
    assert not repeats, f"an observation of an unchanged registry: {versions}"
