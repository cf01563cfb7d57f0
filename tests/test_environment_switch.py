"""RL_ASSETS_ENV: local by default; ``kubernetes`` picks step pods, cloned-PVC forks and a Secret judge key.

The Kubernetes rollout path is exercised against a fake Kubernetes API (no API
server can run here): the real client, real request bodies checked against the
API schema, a pod whose log carries the rollout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fakes.kube_api import FakeKubeApi, PodScript, ready_snapshot, serve

from rl_assets.domain.agent import Rollout
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.kubernetes.names import world_build_claim_name, world_snapshot_name
from rl_assets.kubernetes.pod_specs import FORK_MOUNT
from rl_assets.resources.k8s_world_store import K8sWorldStoreResource
from rl_assets.sandbox.launcher import SandboxTimeout
from rl_assets.sandbox.protocol import EXIT_FAULT, RESULT_MARKER, SandboxFault, SandboxRequest
from rl_assets.workloads.seams import AttemptFork

PROBE = """
import json, rl_assets.definitions as d
jobs = {n: d.defs.resolve_job_def(n).executor_def for n in ("trial_job", "judge_job", "train_job", "world_job")}
judge = d.defs.resources["judge"]
print(json.dumps({
    "executors": {n: e.name for n, e in jobs.items()},
    "world_store": type(d.defs.resources["world_store"]).__name__,
    "judge_key": [type(judge.api_key).__name__, getattr(judge.api_key, "env_var_name", None)],
}))
"""


def _probe(env: str | None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "RL_ASSETS_ENV"}
    if env is not None:
        environ["RL_ASSETS_ENV"] = env
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", PROBE], env=environ, capture_output=True, text=True, timeout=120
    )


def test_local_is_the_default_environment():
    out = json.loads(_probe(None).stdout)
    assert out["executors"] == {n: "in_process" for n in ("trial_job", "judge_job", "train_job", "world_job")}
    assert out["world_store"] == "WorldStoreResource"


def test_kubernetes_environment_runs_steps_in_pods_with_a_secret_judge_key():
    out = json.loads(_probe("kubernetes").stdout)
    assert out["executors"]["trial_job"] == out["executors"]["train_job"] == "rl_assets_k8s"
    assert out["executors"]["world_job"] == "in_process", "a world is built in its run worker, on its PVC"
    assert out["world_store"] == "K8sWorldStoreResource"
    assert out["judge_key"] == ["EnvVar", "RL_ASSETS_JUDGE_API_KEY"], "the key is read from the env at run time"


def test_unknown_environment_is_refused_clearly():
    proc = _probe("cloud")
    assert proc.returncode != 0 and "RL_ASSETS_ENV must be 'local' or 'kubernetes' (got 'cloud')" in proc.stderr


@pytest.fixture
def fake_api():
    api = FakeKubeApi()
    api.seed(ready_snapshot(world_snapshot_name("w0"), world_build_claim_name("dagster-run-0123abcd-x7k2p")))
    with serve(api) as api_client:
        store = K8sWorldStoreResource(namespace="rl-assets", image="rl-assets:0.1.0")
        store._api_client = api_client
        yield api, store
    assert api.rejected == [], "a request body the API schema rejects"


def _request(fork) -> SandboxRequest:
    spec = ExperimentConfig(name="ref").trial(0, "p0-n0")
    return SandboxRequest(spec=spec, prior=[1.0] * 8, fork=fork)


def test_k8s_rollout_runs_in_a_pod_on_a_cloned_fork_fake_api(fake_api):
    api, store = fake_api
    rollout = Rollout(turns=[], answer="", files_written=["answer.txt"])
    api.pod_script = PodScript(log=f"turn 1\n{RESULT_MARKER}{rollout.model_dump_json()}\n")
    seen = []

    def make_request(fork):
        seen.append(fork)
        return _request(fork)

    assert store.rollout(AttemptFork("w0", "ref", "s0-p0-n0", 7), make_request, timeout_s=30) == rollout
    assert seen[0].merged == FORK_MOUNT and seen[0].kind == "copy"
    (claim,) = [c.body for c in api.calls_of("POST", "PersistentVolumeClaim")]
    assert claim["spec"]["dataSource"]["name"] == world_snapshot_name("w0")
    (pod,) = [c.body for c in api.calls_of("POST", "Pod")]
    assert pod["spec"]["activeDeadlineSeconds"] == 30, "the trial timeout is the pod's deadline"
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    env = pod["spec"]["containers"][0]["env"]
    assert all("valueFrom" not in e for e in env), "no Secret reaches a rollout pod"
    assert api.names("PersistentVolumeClaim") == [] and api.names("Pod") == [], "fork and pod deleted"


def test_k8s_rollout_fault_and_deadline_become_sandbox_errors_fake_api(fake_api):
    api, store = fake_api
    api.pod_script = PodScript(phase="Failed", exit_code=EXIT_FAULT, log="injected sandbox fault")
    with pytest.raises(SandboxFault):
        store.rollout(AttemptFork("w0", "ref", "s0-p0-n0", 1), _request, timeout_s=30)
    api.pod_script = PodScript(phase="Failed", exit_code=137, reason="DeadlineExceeded")
    with pytest.raises(SandboxTimeout):
        store.rollout(AttemptFork("w0", "ref", "s0-p0-n0", 2), _request, timeout_s=30)
    assert api.names("PersistentVolumeClaim") == [] and api.names("Pod") == [], "deleted after failures too"


def test_world_build_run_gets_an_ephemeral_volume_tag_and_the_sensor_calls_no_api(monkeypatch):
    """The driver sensor runs in the code server, whose account has no rights: it must create nothing."""
    from rl_assets.driver.deployment import ENV_VAR, launch_tags

    monkeypatch.setenv(ENV_VAR, "kubernetes")
    store = K8sWorldStoreResource(namespace="rl-assets", image="rl-assets:0.1.0", world_size="3Gi")
    store._api_client = object()  # any Kubernetes call would fail on it
    (config,) = launch_tags("world_job", "w0", store).values()
    (volume,) = json.loads(config)["pod_spec_config"]["volumes"]
    claim = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == store.storage_class and claim["resources"]["requests"]["storage"] == "3Gi"
    assert launch_tags("trial_job", "s0-p0-n0", store) == {}
