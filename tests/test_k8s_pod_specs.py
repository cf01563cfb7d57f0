"""The pods a trial generates on Kubernetes, built by dagster-k8s itself, validated strictly.

Step pods: the real ``K8sStepHandler.launch_step`` of the real executor config
(rl_assets/kubernetes/executor.py), with a ``K8sRunLauncher`` configured as the
Helm values configure it (its ``runK8sConfig`` comes from
deploy/helm/dagster-values.yaml), for the real trial, judge and train assets;
only the Kubernetes Batch API is replaced, by a mock that captures the Job.
Run-worker pod: the real ``K8sRunLauncher.launch_run``. Rollout pod: the
manifest the trial step creates. Every one must pass kubernetes-validate in
strict mode, and the tests check the security properties each tier promises.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import dagster as dg
import pytest
import yaml
from dagster._core.execution.api import create_execution_plan
from dagster._core.execution.context.system import PlanData, PlanOrchestrationContext
from dagster._core.execution.context_creation_job import create_context_free_log_manager
from dagster._core.execution.retries import RetryMode
from dagster._core.executor.init import InitExecutorContext
from dagster._core.executor.step_delegating import StepHandlerContext
from dagster._core.launcher import LaunchRunContext
from dagster._core.system_config.objects import ResolvedRunConfig
from dagster._grpc.types import ExecuteStepArgs
from fakes.k8s_schemas import validate
from fakes.pod_security import BASELINE, RESTRICTED, violations
from kubernetes.client import ApiClient

from rl_assets.assets.rollout_batches import batch_run_config
from rl_assets.definitions import defs, get_rollout_job, get_rollout_pods_job
from rl_assets.driver.jobs import train_job, trial_job
from rl_assets.kubernetes import K8sSettings, batch_run_tags, k8s_executor, rollout_pod, world_build_tags
from rl_assets.kubernetes.names import TIER_LABEL, WORLD_VOLUME, fork_claim_name
from rl_assets.kubernetes.pod_specs import (
    FORK_MOUNT,
    JUDGE_KEY_ENV,
    POD_NAME_ENV,
    RAY_AUTH_MODE_ENV,
    RAY_AUTH_TOKEN_ENV,
    RUNNER_SERVICE_ACCOUNT,
    RUNTIME_UID,
    WORLD_MOUNT,
)
from rl_assets.kubernetes.tiers import JUDGE, JUDGE_BATCH, ROLLOUT, TRAIN, TRIAL, TRIAL_BATCH

HELM_VALUES = Path(__file__).parents[1] / "deploy" / "helm" / "dagster-values.yaml"
IMAGE = "rl-assets:0.1.0"
SETTINGS = K8sSettings()
PG_SECRET = "rl-assets-postgresql"


def _on_k8s(job: dg.UnresolvedAssetJobDefinition) -> dg.UnresolvedAssetJobDefinition:
    """The same job with the Kubernetes executor: what the environment switch does."""
    return dg.define_asset_job(
        job.name,
        selection=job.selection,
        partitions_def=job.partitions_def,
        tags=job.tags,
        executor_def=k8s_executor(SETTINGS),
    )


K8S_DEFS = dg.Definitions(assets=defs.assets, resources=defs.resources, jobs=[_on_k8s(trial_job), _on_k8s(train_job)])


def get_trial_job() -> dg.JobDefinition:
    return K8S_DEFS.resolve_job_def(trial_job.name)


def get_train_job() -> dg.JobDefinition:
    return K8S_DEFS.resolve_job_def(train_job.name)


def _run_launcher_config(kubeconfig: Path) -> dict[str, Any]:
    """The K8sRunLauncher config the chart renders from our values (templates/helpers/instance/_run-launcher.tpl)."""
    values = yaml.safe_load(HELM_VALUES.read_text())
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    rk = launcher["runK8sConfig"]
    return {
        "service_account_name": values["serviceAccount"]["name"],  # dagster.serviceAccountName (no global one)
        "instance_config_map": "dagster-instance",
        "postgres_password_secret": values["global"]["postgresqlSecretName"],
        "dagster_home": "/opt/dagster/dagster_home",
        "job_namespace": SETTINGS.namespace,
        "image_pull_policy": launcher["imagePullPolicy"],
        "load_incluster_config": False,  # the chart says true; outside a cluster the client needs a kubeconfig
        "kubeconfig_file": str(kubeconfig),
        "run_k8s_config": {"container_config": rk["containerConfig"], "pod_spec_config": rk["podSpecConfig"]},
    }


@pytest.fixture(scope="module")
def resource_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The env vars the code location's resources read; resolving the run config needs them set."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RL_ASSETS_HOME", str(tmp_path_factory.mktemp("home")))
        patch.setenv("RL_ASSETS_RAY_ADDRESS", "ray://rl-assets-trainer-head-svc:10001")
        patch.setenv("RL_ASSETS_RAY_NAMESPACE", "rl-assets")
        yield


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory, resource_env: None) -> Iterator[dg.DagsterInstance]:
    kubeconfig = tmp_path_factory.mktemp("kube") / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "none", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "none", "user": {}}],
                "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
                "current-context": "none",
            }
        )
    )
    overrides = {
        "run_launcher": {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": _run_launcher_config(kubeconfig)}
    }
    with dg.instance_for_test(overrides=overrides) as inst:
        yield inst


def _recon(get_job: Any) -> Any:
    """The job as the code server hands it out: with its image (the chart's ``DAGSTER_CURRENT_IMAGE``)."""
    recon = dg.reconstructable(get_job)
    return recon._replace(repository=recon.repository._replace(container_image=IMAGE))


def _manifest(job: Any) -> dict[str, Any]:
    return ApiClient().sanitize_for_serialization(job)


def _step_job(instance: dg.DagsterInstance, get_job: Any, step_key: str, run_tags: dict[str, str]) -> dict[str, Any]:
    """The Kubernetes Job the real step handler creates for ``step_key``."""
    recon = _recon(get_job)
    job_def = recon.get_definition()
    run = instance.create_run_for_job(job_def=job_def, tags=run_tags, job_code_origin=recon.get_python_origin())
    executor_config = ResolvedRunConfig.build(job_def, {}).execution.execution_engine_config
    executor = job_def.executor_def.executor_creation_fn(
        InitExecutorContext(
            job=recon, executor_def=job_def.executor_def, executor_config=executor_config, instance=instance
        )
    )
    plan = create_execution_plan(recon)
    plan_context = PlanOrchestrationContext(
        plan_data=PlanData(
            job=recon, dagster_run=run, instance=instance, execution_plan=plan, retry_mode=RetryMode.DISABLED
        ),
        log_manager=create_context_free_log_manager(instance, run),
        executor=executor,
        output_capture=None,
    )
    handler = executor._step_handler
    handler._api_client.batch_api = MagicMock()
    context = StepHandlerContext(
        instance=instance,
        plan_context=plan_context,
        steps=plan.steps,
        execute_step_args=ExecuteStepArgs(recon.get_python_origin(), run.run_id, [step_key]),
        dagster_run=run,
    )
    list(handler.launch_step(context))
    (call,) = handler._api_client.batch_api.create_namespaced_job.call_args_list
    assert call.kwargs["namespace"] == SETTINGS.namespace
    return _manifest(call.kwargs["body"])


@pytest.fixture(scope="module")
def step_jobs(instance: dg.DagsterInstance) -> dict[str, dict[str, Any]]:
    leaky_run_tag = {"dagster-k8s/config": json.dumps({"pod_spec_config": {"nodeSelector": {"run-tag": "leaked"}}})}
    return {
        "trajectories": _step_job(instance, get_trial_job, "trajectories", leaky_run_tag),
        "rewards": _step_job(instance, get_trial_job, "rewards", leaky_run_tag),
        "weights": _step_job(instance, get_train_job, "weights", leaky_run_tag),
    }


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


def _container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec["containers"]
    return container


def _assert_hardened(pod_spec: dict[str, Any]) -> None:
    container = _container(pod_spec)
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["runAsUser"] == RUNTIME_UID
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod_spec["enableServiceLinks"] is False
    names = [v["name"] for v in pod_spec["volumes"]]
    assert len(names) == len(set(names)), f"volume listed twice: {names}"
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], "a writable /tmp on a read-only root"


def _secret_refs(container: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})
    }


@pytest.mark.parametrize("step", ["trajectories", "rewards", "weights"])
def test_step_job_validates_strictly_and_is_hardened(step_jobs: dict[str, dict[str, Any]], step: str) -> None:
    job = step_jobs[step]
    validate(job)
    _assert_hardened(_pod(job))
    assert _container(_pod(job))["image"] == IMAGE
    assert violations(_pod(job), BASELINE) == [] and violations(_pod(job), RESTRICTED) == []


@pytest.mark.parametrize(("step", "tier"), [("trajectories", TRIAL), ("rewards", JUDGE), ("weights", TRAIN)])
def test_each_step_gets_its_tiers_label_resources_and_deadline(
    step_jobs: dict[str, dict[str, Any]], step: str, tier: Any
) -> None:
    job = step_jobs[step]
    assert job["spec"]["template"]["metadata"]["labels"][TIER_LABEL] == tier.name
    assert _container(_pod(job))["resources"] == tier.resources()
    assert _pod(job)["activeDeadlineSeconds"] == tier.deadline_s


def test_run_level_k8s_config_tag_does_not_reach_step_pods(step_jobs: dict[str, dict[str, Any]]) -> None:
    """The research note, checked: only per-step config and op tags reach step pods (executor.py:262)."""
    for job in step_jobs.values():
        assert "nodeSelector" not in _pod(job)


def test_only_the_trial_step_has_a_service_account_token(step_jobs: dict[str, dict[str, Any]]) -> None:
    tokens = {step: _pod(job)["automountServiceAccountToken"] for step, job in step_jobs.items()}
    assert tokens == {"trajectories": True, "rewards": False, "weights": False}


def test_every_step_pod_runs_as_the_runner_not_the_launchers_account(step_jobs: dict[str, dict[str, Any]]) -> None:
    """The launcher's default account is the daemon's (Helm serviceAccount.name); step pods must not get it."""
    assert {step: _pod(job)["serviceAccountName"] for step, job in step_jobs.items()} == dict.fromkeys(
        step_jobs, RUNNER_SERVICE_ACCOUNT
    )


def test_ray_token_reaches_only_the_train_step_and_only_by_secret_reference(
    step_jobs: dict[str, dict[str, Any]],
) -> None:
    refs = {step: _secret_refs(_container(_pod(job))) for step, job in step_jobs.items()}
    token = {"name": SETTINGS.ray_token.name, "key": SETTINGS.ray_token.key}
    assert refs["weights"][RAY_AUTH_TOKEN_ENV] == token
    assert {"name": RAY_AUTH_MODE_ENV, "value": "token"} in _container(_pod(step_jobs["weights"]))["env"]
    assert all(RAY_AUTH_TOKEN_ENV not in r for step, r in refs.items() if step != "weights")


def test_judge_key_reaches_only_the_judge_step_and_only_by_secret_reference(
    step_jobs: dict[str, dict[str, Any]],
) -> None:
    refs = {step: _secret_refs(_container(_pod(job))) for step, job in step_jobs.items()}
    assert refs["rewards"][JUDGE_KEY_ENV] == {"name": SETTINGS.judge_key.name, "key": SETTINGS.judge_key.key}
    assert all(JUDGE_KEY_ENV not in r for step, r in refs.items() if step != "rewards")
    for job in step_jobs.values():
        literal = [e for e in _container(_pod(job))["env"] if e["name"] == JUDGE_KEY_ENV and "value" in e]
        assert literal == []
    # dagster-k8s gives every step worker the Postgres password, by reference too: why a rollout is not a step.
    assert all(r["DAGSTER_PG_PASSWORD"] == {"name": PG_SECRET, "key": "postgresql-password"} for r in refs.values())


def _rollout() -> dict[str, Any]:
    return rollout_pod(
        experiment="ref",
        trial_id="s0-p1-n0",
        attempt=1,
        fork_claim=fork_claim_name("ref", "s0-p1-n0", 1),
        image=IMAGE,
        request_json='{"spec": {"trial_id": "s0-p1-n0"}}',
    )


def test_rollout_pod_validates_strictly_and_has_no_secret_no_token_no_root_and_its_fork() -> None:
    pod = _rollout()
    validate(pod)
    spec = pod["spec"]
    _assert_hardened(spec)
    container = _container(spec)
    assert pod["metadata"]["labels"][TIER_LABEL] == ROLLOUT.name, "the label the no-network policy selects"
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "rl-assets-rollout"
    assert all(set(e) == {"name", "value"} for e in container["env"]), "only literal, non-secret env values"
    assert "envFrom" not in container
    assert not any("secret" in json.dumps(v).lower() for v in spec["volumes"]), "no Secret volume"
    (fork,) = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    assert fork["persistentVolumeClaim"] == {"claimName": fork_claim_name("ref", "s0-p1-n0", 1)}
    assert {"name": fork["name"], "mountPath": FORK_MOUNT} in container["volumeMounts"]
    assert container["resources"] == ROLLOUT.resources()
    assert spec["activeDeadlineSeconds"] == ROLLOUT.deadline_s
    assert spec["restartPolicy"] == "Never"


def _run_worker_job(
    instance: dg.DagsterInstance, get_job: Any, tags: dict[str, str], run_config: dict | None = None
) -> dict[str, Any]:
    """The run worker's Job the real run launcher creates for a run with these tags, validated strictly and
    checked hardened and within the restricted Pod Security Standard."""
    launcher = instance.run_launcher
    launcher._api_client.batch_api = MagicMock()
    recon = _recon(get_job)
    run = instance.create_run_for_job(
        job_def=recon.get_definition(), run_config=run_config, tags=tags, job_code_origin=recon.get_python_origin()
    )
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    (call,) = launcher._api_client.batch_api.create_namespaced_job.call_args_list
    job = _manifest(call.kwargs["body"])
    validate(job)
    _assert_hardened(_pod(job))
    assert violations(_pod(job), BASELINE) == [] and violations(_pod(job), RESTRICTED) == []
    return job


def test_world_build_run_worker_gets_an_ephemeral_world_volume(instance: dg.DagsterInstance) -> None:
    """World builds run in process in the run worker, where run tags do apply (launcher.py:209-210).

    The volume is ephemeral, so its PVC is created by Kubernetes with the pod: no
    account (not the code server's, where the driver sensor runs) creates it.
    """
    job = _run_worker_job(instance, get_trial_job, world_build_tags("w0", "rl-assets-worlds", "1Gi"))
    pod_spec = _pod(job)
    (world,) = [v for v in pod_spec["volumes"] if v["name"] == WORLD_VOLUME]
    claim = world["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "rl-assets-worlds" and claim["resources"]["requests"]["storage"] == "1Gi"
    container = _container(pod_spec)
    assert {"name": WORLD_VOLUME, "mountPath": WORLD_MOUNT} in container["volumeMounts"]
    assert {"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    assert pod_spec["automountServiceAccountToken"] is True, "the run worker launches step Jobs"
    assert pod_spec["serviceAccountName"] == RUNNER_SERVICE_ACCOUNT


@pytest.mark.parametrize("judge_only", [False, True], ids=["rolling-out", "judging"])
def test_a_rollout_runs_worker_pod_has_the_token_or_the_judge_key_never_both(
    instance: dg.DagsterInstance, judge_only: bool
) -> None:
    """A rollout run's worker is its trials' step (rollout runs are in process), built by the real run launcher
    from the run's tags: rolling out, it drives rollout pods with the token; judging, it has the key and no token."""
    job = _run_worker_job(
        instance,
        get_rollout_job if judge_only else get_rollout_pods_job,
        batch_run_tags(judge_only, SETTINGS.judge_key),
        batch_run_config(["ref/s0|p0-n0"], judge_only=judge_only, rollout_only=not judge_only),
    )
    pod_spec = _pod(job)
    tier = JUDGE_BATCH if judge_only else TRIAL_BATCH
    assert job["spec"]["template"]["metadata"]["labels"][TIER_LABEL] == tier.name, "its tier's NetworkPolicy"
    container = _container(pod_spec)
    assert container["resources"] == tier.resources() and pod_spec["activeDeadlineSeconds"] == tier.deadline_s
    assert pod_spec["serviceAccountName"] == RUNNER_SERVICE_ACCOUNT
    refs = _secret_refs(container)
    if judge_only:
        assert pod_spec["automountServiceAccountToken"] is False
        assert refs[JUDGE_KEY_ENV] == {"name": SETTINGS.judge_key.name, "key": SETTINGS.judge_key.key}
    else:
        assert pod_spec["automountServiceAccountToken"] is True, "it clones forks and starts rollout pods"
        assert JUDGE_KEY_ENV not in refs and all(e["name"] != JUDGE_KEY_ENV for e in container["env"])
        assert {"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
