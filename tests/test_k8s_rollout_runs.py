"""On Kubernetes a step's trials are two runs: one worker drives every trial's rollout pod at once, then one judges.

The runs are requested as the driver's sensor requests them with ``RL_ASSETS_ENV=kubernetes`` and executed in
this process on the home's real Dagster instance and ledgers; the Kubernetes API is the fake one of
:mod:`fakes.kube_api` (no API server can run here), whose rollout pods finish only once all of the batch's
pods exist, so the rollout run can only end if its worker drives them all at the same time.
"""

from __future__ import annotations

import json
import uuid
from functools import partial

import dagster as dg
import pytest
from fakes.kube_api import FakeKubeApi, PodScript, ready_snapshot, serve
from kubernetes.config import kube_config

from rl_assets.assets.partitions import partitions_to_add, trial_partition_key
from rl_assets.assets.rollout_batches import ROLLOUT_PODS_JOB, batch_members, batch_run_config
from rl_assets.definitions import defs
from rl_assets.domain.agent import Rollout
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.runtime import Runtime
from rl_assets.driver.deployment import ENV_VAR
from rl_assets.driver.planner import materialized_partitions, plan
from rl_assets.driver.sensor import ROLLOUT_JOBS, _rolled_out, run_requests_of
from rl_assets.kubernetes.names import world_build_claim_name, world_snapshot_name
from rl_assets.kubernetes.pod_specs import JUDGE_KEY_ENV, USER_DEFINED_K8S_CONFIG_TAG
from rl_assets.resources import k8s_world_store
from rl_assets.resources.k8s_world_store import K8sWorldStoreResource
from rl_assets.sandbox.protocol import RESULT_MARKER

TRIALS = 8


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    """The fake API with world w0's snapshot, a kubeconfig naming it (the worker's world store makes its own
    client, as in a pod), and a world store whose seal store answers for w0."""
    api = FakeKubeApi(finish_when_pods=TRIALS)
    rollout = Rollout(turns=[], answer="", files_written=[])
    api.pod_script = PodScript(log=f"{RESULT_MARKER}{rollout.model_dump_json()}\n")
    api.seed(ready_snapshot(world_snapshot_name("w0"), world_build_claim_name("dagster-run-0123abcd-x7k2p")))
    monkeypatch.setattr(k8s_world_store, "_seal", lambda world_id: "sealed-w0" if world_id == "w0" else None)
    with serve(api) as api_client:
        kubeconfig = tmp_path / "kubeconfig"
        cluster = {"name": "fake", "cluster": {"server": api_client.configuration.host}}
        context = {"name": "fake", "context": {"cluster": "fake", "user": "fake"}}
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [cluster],
                    "users": [{"name": "fake", "user": {}}],
                    "contexts": [context],
                    "current-context": "fake",
                }
            )
        )
        # $KUBECONFIG as the client reads it: once, when it is imported.
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
        yield api, K8sWorldStoreResource(namespace="rl-assets", image="rl-assets:0.1.0")
    assert api.rejected == [], "a request body the API schema rejects"


def _requests(monkeypatch, instance, stores, config) -> list[dg.RunRequest]:
    """What the driver's rollout lane requests on Kubernetes for the experiment's current plan."""
    monkeypatch.setenv(ENV_VAR, "kubernetes")
    try:
        rolled_out = partial(_rolled_out, instance, stores)  # the sensor's own
        return run_requests_of(
            stores, [plan(instance, stores, config)], None, print, ROLLOUT_JOBS, rolled_out=rolled_out
        )
    finally:
        monkeypatch.delenv(ENV_VAR)


def _execute(instance, request: dg.RunRequest, **resources) -> dg.ExecuteInProcessResult:
    job = defs.resolve_job_def(request.job_name)
    return job.execute_in_process(
        run_config=request.run_config, instance=instance, tags=request.tags, resources=resources or None
    )


def _pod_config(request: dg.RunRequest) -> dict:
    return json.loads(request.tags[USER_DEFINED_K8S_CONFIG_TAG])


def test_one_worker_drives_every_rollout_pod_of_a_batch_and_another_judges_them(
    monkeypatch, cluster, home, stores, instance
):
    api, store = cluster
    config = ExperimentConfig(name=f"pods-{uuid.uuid4().hex[:8]}", steps=1, worlds=1, prompts=TRIALS, samples=1)
    stores.experiments.create_or_resume(config, Runtime())
    for name, keys in partitions_to_add(config, 1).items():
        instance.add_dynamic_partitions(name, [k for k in keys if not instance.has_dynamic_partition(name, k)])
    if "w0" not in instance.get_materialized_partitions(dg.AssetKey("worlds")):
        # Built for real (the home is shared, and a world's materialization is every experiment's input); the
        # rollouts below use the cluster's snapshot of it.
        world_job = defs.resolve_job_def("world_job")
        assert world_job.execute_in_process(instance=instance, partition_key="w0").success
    keys = sorted(str(trial_partition_key(config, 0, slot)) for slot in config.trial_slots())

    (rollouts,) = _requests(monkeypatch, instance, stores, config)
    assert rollouts.job_name == ROLLOUT_PODS_JOB and batch_members(rollouts.run_config) == keys
    pod = _pod_config(rollouts)
    assert pod["pod_spec_config"]["automountServiceAccountToken"] is True, "it creates forks and rollout pods"
    assert JUDGE_KEY_ENV not in json.dumps(pod), "the worker that drives pods has no judge key"

    judging_too = batch_run_config(keys, judge_only=False)  # its worker has no judge key: refused, nothing started
    refused = defs.resolve_job_def(ROLLOUT_PODS_JOB).execute_in_process(
        run_config=judging_too, instance=instance, resources={"world_store": store}, raise_on_error=False
    )
    (failure,) = [e for e in refused.all_events if e.is_step_failure]
    assert "only rolls out" in failure.step_failure_data.error.message and api.pods_created == 0

    result = _execute(instance, rollouts, world_store=store)
    assert result.success
    assert api.peak_pods == TRIALS, "every trial's rollout pod at once, from one worker"
    reads = [c for c in api.calls_of("GET", "Pod") if c.name is not None]
    assert len(reads) == 2 * TRIALS, "waiting lists the worker's pods: a pod is read only at its end (and its log)"
    assert api.names("Pod") == [] and api.names("PersistentVolumeClaim") == [], "pods and forks deleted"
    assert materialized_partitions(instance, "trajectories", set(keys)) == set(keys)
    assert materialized_partitions(instance, "rewards", set(keys)) == set(), "nothing judged in its worker"
    assert stores.db.scalar("SELECT count(*) FROM rl_judge_attempts WHERE experiment = %s", (config.name,)) == 0
    output = next(e for e in result.all_events if e.event_type_value == "STEP_OUTPUT")
    assert output.event_specific_data.metadata["rolled_out"].value == TRIALS

    # A trajectory record damaged after its rollout (and reported, as the audit does) is rolled out again, not
    # judged, as its trial run would regenerate it; then the trial is judged with the others.
    record = home / "artifacts" / "trajectories" / config.name / "s0" / f"{config.trial_slots()[0]}.json"
    body = json.loads(record.read_text())
    body["payload"]["answer"] = "tampered"  # the old checksum kept, as a stray edit would
    record.write_text(json.dumps(body))
    stores.damage.report("trial", keys[0], "trajectory record was damaged")
    requests = {r.job_name: r for r in _requests(monkeypatch, instance, stores, config)}
    assert {job: batch_members(r.run_config) for job, r in requests.items()} == {
        ROLLOUT_PODS_JOB: keys[:1],
        "rollout_job": keys[1:],
    }
    assert _execute(instance, requests[ROLLOUT_PODS_JOB], world_store=store).success
    assert json.loads(record.read_text())["payload"]["answer"] != "tampered"

    (judging,) = _requests(monkeypatch, instance, stores, config)
    assert judging.job_name == "rollout_job" and batch_members(judging.run_config) == keys
    assert judging.run_config["ops"]["roll_out_trials"]["config"]["judge_only"] is True
    pod = _pod_config(judging)
    assert pod["pod_spec_config"]["automountServiceAccountToken"] is False, "the judging worker has no token"
    (key,) = [e for e in pod["container_config"]["env"] if e["name"] == JUDGE_KEY_ENV]
    assert "secretKeyRef" in key["valueFrom"], "the judge's key by reference only"

    pods_before = api.pods_created
    assert _execute(instance, judging).success
    assert api.pods_created == pods_before, "judging rolls nothing out"
    assert materialized_partitions(instance, "rewards", set(keys)) == set(keys)
    assert _requests(monkeypatch, instance, stores, config) == [], "every trial rewarded: the step trains next"
    assert keys[0] not in stores.damage.open_keys("trial"), "its judging repaired the damaged trial"
