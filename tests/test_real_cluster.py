"""Opt-in: the reference experiment, with the chaos flags, on a real Kubernetes cluster.

Runs only when ``KUBECONFIG`` names a cluster deployed as in deploy/README.md, steps 1-11 (Postgres,
KubeRay, the Dagster chart with deploy/helm/dagster-values.yaml); otherwise every test here is skipped,
with this reason shown by pytest's ``-ra`` summary. Needs ``kubectl`` on PATH. Settings (environment):

- ``RL_ASSETS_K8S_NAMESPACE`` (default ``rl-assets``);
- ``RL_ASSETS_K8S_WEBSERVER`` (default ``svc/dagster-dagster-webserver``), reached by ``kubectl port-forward``;
- ``RL_ASSETS_K8S_CODE_DEPLOYMENT`` (default ``deploy/dagster-dagster-user-deployments-rl-assets``), where
  the durable results are read, with the deployment's own env (its Postgres and its home volume);
- ``RL_ASSETS_K8S_DEADLINE_S`` (default 3600): how long the experiment may take.

Run it: ``KUBECONFIG=~/.kube/config .venv/bin/python -m pytest tests/test_real_cluster.py -v``.
The experiment is started the way a user does from the launchpad (``start_experiment_job`` through the
webserver's GraphQL API); the daemon's driver sensor does the rest.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.kubernetes.names import OWNER_LABEL, TIER_LABEL, owner_value
from rl_assets_testkit.expectations import oracle_expectation, table_of

pytestmark = pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"),
    reason="opt-in: set KUBECONFIG to a cluster deployed per deploy/README.md (steps 1-11) to run it",
)

NAMESPACE = os.environ.get("RL_ASSETS_K8S_NAMESPACE", "rl-assets")
WEBSERVER = os.environ.get("RL_ASSETS_K8S_WEBSERVER", "svc/dagster-dagster-webserver")
CODE = os.environ.get("RL_ASSETS_K8S_CODE_DEPLOYMENT", "deploy/dagster-dagster-user-deployments-rl-assets")
DEADLINE_S = float(os.environ.get("RL_ASSETS_K8S_DEADLINE_S", "3600"))
POLL_S = 15.0

RESULT = """
import json, os, sys
from rl_assets.stores.home_stores import Stores
from rl_assets.views.results import experiment_result
from rl_assets.stores.database import Database
stores = Stores(os.environ["RL_ASSETS_HOME"], Database.from_env())
config = stores.experiments.get(sys.argv[1])
result = experiment_result(stores, config)
print(json.dumps(result if len(result["steps"]) == config.steps else None))
"""


def kubectl(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(["kubectl", "-n", NAMESPACE, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


@pytest.fixture(scope="module")
def graphql() -> Iterator:
    from dagster_graphql import DagsterGraphQLClient

    forward = subprocess.Popen(
        ["kubectl", "-n", NAMESPACE, "port-forward", WEBSERVER, "0:80"], stdout=subprocess.PIPE, text=True
    )
    try:
        line = forward.stdout.readline() if forward.stdout else ""
        match = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert match, f"kubectl port-forward printed {line!r}"
        yield DagsterGraphQLClient("127.0.0.1", port_number=int(match.group(1)))
    finally:
        forward.terminate()
        forward.wait()


def _result(name: str) -> dict | None:
    out = kubectl("exec", CODE, "--", "python", "-c", RESULT, name).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_reference_experiment_with_chaos_on_the_cluster_gives_the_clean_result(graphql):
    config = ExperimentConfig(name=f"cluster-{uuid.uuid4().hex[:6]}")
    launch = {
        "name": config.name,
        "flaky_trial_rate": 0.25,
        "judge_flake_rate": 0.3,
        "tool_latency_s": 0.2,
        "judge_latency_s": 0.5,
    }
    graphql.submit_job_execution(
        "start_experiment_job",
        repository_location_name="rl-assets",
        run_config={"ops": {"start_experiment": {"config": launch}}},
    )
    deadline = time.monotonic() + DEADLINE_S
    while (result := _result(config.name)) is None:
        assert time.monotonic() < deadline, f"{config.name} not trained within {DEADLINE_S:.0f} s"
        time.sleep(POLL_S)  # polling a cluster far away; the condition decides, not the sleep

    table, weights = oracle_expectation(config)
    assert table_of(result) == table and result["weights"] == weights
    trials = config.steps * config.prompts * config.samples
    assert result["counts"]["judge_calls"] == trials, "one paid judge call per trial"
    assert result["counts"]["train_applications"] == config.steps
    assert len({s["actor_pid"] for s in result["steps"]}) == 1, "one detached trainer actor for the experiment"

    # Every fork and rollout pod of the experiment was deleted after its attempt.
    for spec in (spec for step in range(config.steps) for spec in config.trials(step)):
        selector = f"{OWNER_LABEL}={owner_value(config.name, spec.trial_id)}"
        left = kubectl("get", "pvc,pods", "-l", selector, "-o", "name").stdout.split()
        assert left == [], f"{spec.trial_id} left {left}"


def test_a_rollout_pod_cannot_reach_postgres_or_the_internet():
    image = kubectl("get", CODE, "-o", "jsonpath={.spec.template.spec.containers[0].image}").stdout.strip()
    probe = (
        "import socket, sys\n"
        "for host, port in (('postgres', 5432), ('1.1.1.1', 80)):\n"
        "    try:\n"
        "        socket.create_connection((host, port), 5); print('reached', host); sys.exit(1)\n"
        "    except OSError as err: print('refused', host, err)\n"
    )
    name = f"nettest-{uuid.uuid4().hex[:6]}"
    proc = kubectl(
        "run", name, "--rm", "-i", "--restart=Never", f"--labels={TIER_LABEL}=rollout", f"--image={image}",
        "--command", "--", "python", "-c", probe,
        check=False,
    )  # fmt: skip
    assert "reached" not in proc.stdout, proc.stdout
    assert proc.stdout.count("refused") == 2, proc.stdout + proc.stderr
