"""The home's run launcher with a gate: each worker, once it has tagged its run, waits for a file before going on.

A race test uses it to catch a launcher's death at the worst moment: the worker exists and has tagged its run,
its launcher is SIGKILLed, and the run must still be seen alive. It is the shipped
:class:`~rl_assets.instance.run_launcher.WarmRunLauncher` with one step added to its worker (through the worker's
``after_tagging`` seam), named by an instance configuration of the test's own (:func:`gated_instance`), never by
the home's ``dagster.yaml``: the rl-assets wheel ships no test hook.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
import yaml

from rl_assets.instance.run_launcher import WarmRunLauncher

GATED_CONFIG = "dagster-gated.yaml"
"""The gated instance's configuration, beside the home's ``dagster.yaml`` (so its storage directories are the
home's)."""


def wait_for_file(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.05)


class GatedRunLauncher(WarmRunLauncher):
    """Workers forked as the home's are, held after tagging their run until the ``gate`` file exists."""

    def __init__(self, inst_data: Any = None, gate: str = "") -> None:
        super().__init__(inst_data=inst_data)
        self.gate = gate

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {"gate": dg.Field(str, description="the file each worker waits for once it has tagged its run")}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> GatedRunLauncher:
        return cls(inst_data=inst_data, gate=config_value["gate"])

    def worker(self, run_id: str, log_path: str) -> tuple[Callable[..., None], tuple[Any, ...]]:
        target, args = super().worker(run_id, log_path)
        return target, (*args, functools.partial(wait_for_file, self.gate))


def gated_instance(gate: str) -> dg.DagsterInstance:
    """The home's instance (``DAGSTER_HOME``) with :class:`GatedRunLauncher` as its run launcher."""
    dagster_home = os.environ["DAGSTER_HOME"]
    with open(os.path.join(dagster_home, "dagster.yaml")) as f:
        config = yaml.safe_load(f)
    config["run_launcher"] = {
        "module": __name__,
        "class": GatedRunLauncher.__name__,
        "config": {"gate": gate},
    }
    with open(os.path.join(dagster_home, GATED_CONFIG), "w") as f:
        yaml.safe_dump(config, f)
    return dg.DagsterInstance.from_config(dagster_home, GATED_CONFIG)
