"""Harbor task trials on Kubernetes, against the FAKE API server (tests/fakes/kube_api.py, kube_exec.py).

The world store's real ``task_session`` runs against a fake API server on loopback, reached through
a kubeconfig as in a real deployment: the fork is a PVC cloned from the world's snapshot, the task
pod is created (and schema-checked) and deleted, and every command goes through the real client's
``stream(connect_get_namespaced_pod_exec, ...)`` over a websocket speaking ``v4.channel.k8s.io``.
The fake's "container" is bubblewrap over this machine's system directories with the pod's volumes
bound where the pod spec mounts them (a stand-in: the task's image is not pulled; the tests check
which image the created pod names). A task world is built by the store into the directory the fake
keeps for the build pod's volume, and the fake's snapshot of that directory is what forks clone.

Not shown here, nor by any other automated test yet:

- that a real kubelet and container runtime exec the same way;
- that the verifier's killing of the agent's leftover processes works: the fake gives every exec a
  fresh pid namespace, so nothing an exec starts outlives it and there is nothing left to kill (in
  a real pod a background process of the agent's would survive until the verifier kills it);
- that a CNI enforces the task NetworkPolicies (tests/test_k8s_security.py evaluates them from the
  manifests only), or that a CSI driver snapshots and clones a task world.

deploy/README.md's cluster run (tests/test_real_cluster.py) runs the reference experiment only, no
Harbor task, so it covers none of these for task pods.
"""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
import yaml
from fakes.k8s_schemas import validate
from fakes.kube_api import FakeKubeApi, serve
from fakes.pod_security import BASELINE, RESTRICTED, violations
from kubernetes import client
from kubernetes.config import kube_config

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.kubernetes.names import NETWORK_LABEL, world_build_claim_name, world_snapshot_name
from rl_assets.kubernetes.pod_specs import POD_NAME_ENV, POD_UID_ENV, trial_step_k8s_config
from rl_assets.kubernetes.task_pods import PodOwner, task_image, task_pod
from rl_assets.resources import k8s_world_store
from rl_assets.resources.k8s_world_store import K8sWorldStoreResource
from rl_assets.sandbox.exec_protocol import CappedOutput
from rl_assets.sandbox.task_shell import OUTPUT_BYTES
from rl_assets.tasks.locality import BUILD_AND_PUSH
from rl_assets.tasks.snapshot import (
    LOCAL_POLICY_ON_KUBERNETES,
    TaskSetError,
    record_task_set,
    with_recorded_task_set,
)
from rl_assets.tasks.task import load_task
from rl_assets.tasks.verifier import RewardFileMissing, RewardFileUnsafe, VerifierTimeout
from rl_assets.workloads.seams import AttemptFork
from rl_assets.worlds.local import tree_hash

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"
NS = "rl-assets"
IMAGE = "rl-assets:0.1.0"
PYTHON_TASK_IMAGE = "registry.example/tasks/python:3.12"
TRIAL = "s0-hidden-test-n0"


def make_task(root: Path, name: str, *, toml: str = "", test_sh: str = "", files: dict[str, str] | None = None) -> Path:
    """A task directory: ``task.toml`` with ``toml`` appended, ``tests/test.sh``, ``environment/`` files."""
    path = root / name
    (path / "tests").mkdir(parents=True)
    (path / "environment").mkdir()
    (path / "instruction.md").write_text(f"Do {name}.\n")
    (path / "task.toml").write_text('schema_version = "1.4"\n\n[verifier]\ntimeout_sec = 20.0\n' + toml)
    (path / "tests" / "test.sh").write_text(test_sh or "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    for rel, text in (files or {}).items():
        (path / "environment" / rel).write_text(text)
    return path


# ---------------------------------------------------------------- the pod


STEP_POD = PodOwner("dagster-step-abc", "0b7c6a4e-1111-2222-3333-444455556666")


def _pod(task_dir: Path, owner: PodOwner | None = STEP_POD):
    task = load_task(task_dir)
    return task_pod(
        experiment="bench",
        trial_id="s0-t-n0",
        attempt=3,
        task=task,
        fork_claim="fork-bench-s0-t-n0-a3",
        image=task_image(task, IMAGE),
        deadline_s=900.5,
        owner=owner,
    )


def test_a_task_pod_is_schema_valid_restricted_tokenless_and_sized_by_the_task(tmp_path):
    toml = (
        f'\n[environment]\ndocker_image = "{PYTHON_TASK_IMAGE}"\ncpus = 2\nmemory_mb = 4096\nstorage_mb = 3072\n'
        'network_mode = "public"\nenv = { GREETING = "hi" }\n'
    )
    pod = _pod(make_task(tmp_path, "sized", toml=toml))
    validate(pod)
    spec = pod["spec"]
    assert violations(spec, BASELINE) == [] and violations(spec, RESTRICTED) == []
    (container,) = spec["containers"]
    assert container["image"] == PYTHON_TASK_IMAGE
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["serviceAccountName"] == "rl-assets-rollout", "the account bound to no Role"
    assert "valueFrom" not in json.dumps(pod) and "secret" not in json.dumps(pod).lower()
    assert {"name": "GREETING", "value": "hi"} in container["env"]
    amounts = {"cpu": "2", "memory": "4096Mi", "ephemeral-storage": "3072Mi"}
    assert container["resources"] == {"requests": amounts, "limits": amounts}
    assert container["workingDir"] == "/app" and {"name": "fork", "mountPath": "/app"} in container["volumeMounts"]
    assert {"name": "fork", "persistentVolumeClaim": {"claimName": "fork-bench-s0-t-n0-a3"}} in spec["volumes"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["metadata"]["labels"][NETWORK_LABEL] == "internet", "the task asked for the network explicitly"
    assert spec["activeDeadlineSeconds"] == 901
    (owner,) = pod["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "v1", "kind": "Pod", "name": "dagster-step-abc", "uid": owner["uid"]}


def test_a_task_of_plain_files_runs_on_the_deployments_image_without_network_unless_asked(tmp_path):
    silent = _pod(make_task(tmp_path, "silent"), owner=None)  # Harbor's default would be public: not here
    closed = _pod(make_task(tmp_path, "closed", toml="\n[environment]\nallow_internet = false\n"), owner=None)
    for pod in (silent, closed):
        assert pod["spec"]["containers"][0]["image"] == IMAGE
        assert NETWORK_LABEL not in pod["metadata"]["labels"]
        assert "ownerReferences" not in pod["metadata"]
    amounts = {"cpu": "1", "memory": "2048Mi", "ephemeral-storage": "10240Mi"}
    assert silent["spec"]["containers"][0]["resources"]["limits"] == amounts, "Harbor's defaults"


def test_the_trial_step_knows_its_own_pod_so_task_pods_are_owned_by_it(monkeypatch):
    env = {e["name"]: e for e in trial_step_k8s_config()["container_config"]["env"]}
    assert env[POD_NAME_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env[POD_UID_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    monkeypatch.setenv(POD_NAME_ENV, "step-pod")
    monkeypatch.setenv(POD_UID_ENV, STEP_POD.uid)
    assert PodOwner.from_env() == PodOwner("step-pod", STEP_POD.uid)
    monkeypatch.delenv(POD_UID_ENV)
    assert PodOwner.from_env() is None


# ---------------------------------------------------------------- what is refused where


def _config(tasks: Path) -> ExperimentConfig:
    return ExperimentConfig(name="k", tasks=str(tasks), policy_url="http://127.0.0.1:9/v1", policy_model="m")


def test_a_dockerfile_only_task_is_refused_on_kubernetes_up_front_saying_build_push_and_set_docker_image(tmp_path):
    source = tmp_path / "set"
    make_task(source, "built", files={"Dockerfile": "FROM python:3.12\nWORKDIR /app\n"})
    make_task(source, "plain")
    with pytest.raises(TaskSetError) as refused:
        with_recorded_task_set(_config(source), tmp_path / "tasks", on_kubernetes=True)
    assert str(refused.value) == f"{source / 'built'}: {BUILD_AND_PUSH}"
    assert "docker build" in BUILD_AND_PUSH and "docker push" in BUILD_AND_PUSH and "docker_image" in BUILD_AND_PUSH
    assert not (tmp_path / "tasks").exists(), "nothing is recorded when any task is refused"


def test_image_tasks_run_on_kubernetes_or_in_local_containers_and_plain_tasks_on_both(tmp_path):
    source = tmp_path / "set"
    image = f'\n[environment]\ndocker_image = "{PYTHON_TASK_IMAGE}"\n'
    make_task(source, "pushed", toml=image, files={"Dockerfile": "FROM python:3.12\n"})
    make_task(source, "pulled", toml=image)
    worlds = record_task_set(source, tmp_path / "k8s", on_kubernetes=True)
    assert sorted(worlds) == ["pulled", "pushed"]
    with pytest.raises(TaskSetError) as local:
        record_task_set(source, tmp_path / "local")
    assert "runs in a container, and no container runtime is here" in str(local.value)
    assert sorted(record_task_set(source, tmp_path / "podman", containers=True)) == ["pulled", "pushed"]
    examples = with_recorded_task_set(_config(EXAMPLES), tmp_path / "examples", on_kubernetes=True)
    assert sorted(examples.task_worlds) == ["create-file", "edit-config", "fix-python-function", "hidden-test"]


def test_a_local_policy_is_refused_on_kubernetes_naming_what_serves_instead(tmp_path):
    config = ExperimentConfig(name="k", tasks=str(EXAMPLES), policy="local", trainer="grpo", model="tiny", lr=0.1)
    with pytest.raises(TaskSetError) as refused:
        with_recorded_task_set(config, tmp_path / "tasks", on_kubernetes=True)
    assert str(refused.value) == LOCAL_POLICY_ON_KUBERNETES and "--policy-url" in str(refused.value)
    assert with_recorded_task_set(config, tmp_path / "tasks").task_worlds, "locally it is recorded"


@pytest.mark.parametrize(
    ("files", "toml", "reason"),
    [
        ({"docker-compose.yaml": "services: {}\n"}, "", "multi-container"),
        ({}, '\n[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n', "host names"),
        ({}, '\n[environment]\nos = "windows"\n', "Linux"),
        ({}, "\n[environment]\ngpus = 1\n", "accelerators"),
    ],
)
def test_what_a_task_pod_cannot_be_is_refused_on_kubernetes(tmp_path, files, toml, reason):
    path = make_task(tmp_path / "set", "odd", toml=toml, files=files)
    (path / "tests" / "test.bat").write_text("echo 1 > C:\\logs\\verifier\\reward.txt\n")  # a Windows task's verifier
    with pytest.raises(TaskSetError, match=reason):
        record_task_set(tmp_path / "set", tmp_path / "tasks", on_kubernetes=True)


# ---------------------------------------------------------------- a session on the fake API


@pytest.fixture
def api(tmp_path: Path) -> FakeKubeApi:
    return FakeKubeApi(storage=tmp_path / "cluster")


@pytest.fixture
def store(api: FakeKubeApi, tmp_path: Path, monkeypatch) -> Iterator[K8sWorldStoreResource]:
    """The Kubernetes world store on a home holding the example tasks and a few of this file's, via a kubeconfig."""
    with serve(api) as api_client:
        kubeconfig = tmp_path / "kubeconfig"
        cluster = {"name": "fake", "cluster": {"server": api_client.configuration.host}}
        context = {"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": NS}}
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [cluster],
                    "contexts": [context],
                    "current-context": "fake",
                    "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
                }
            )
        )
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))  # $KUBECONFIG, read at import
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        monkeypatch.setattr(client.Configuration, "_default", None)  # load_kube_config sets a process default
        yield K8sWorldStoreResource(namespace=NS, image=IMAGE, home=str(tmp_path / "home"))
    assert api.rejected == [], "the code under test sent bodies the API schema rejects"


def sealed_world(api: FakeKubeApi, store: K8sWorldStoreResource, source: Path, name: str) -> str:
    """Record the task set at ``source`` and put ``name``'s world on the fake as built and snapshotted."""
    world_id = record_task_set(source, Path(store.home) / "tasks", on_kubernetes=True)[name]
    snapshot = world_snapshot_name(world_id)
    api.seed(
        {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": snapshot},
            "spec": {"source": {"persistentVolumeClaimName": "world-build-pvc"}},
            "status": {"readyToUse": True, "restoreSize": "1Gi"},
        }
    )
    contents = api.storage / "snapshots" / snapshot
    shutil.copytree(Path(store.home) / "tasks" / world_id / "environment", contents)
    api.snapshot_contents[snapshot] = contents
    return world_id


def open_session(store: K8sWorldStoreResource, world_id: str, attempt: int = 1):
    return store.task_session(AttemptFork(world_id, "bench", TRIAL, attempt), store.task(world_id))


def test_commands_run_in_the_pod_through_exec_with_exit_codes_output_state_and_the_tasks_env(api, store, tmp_path):
    source = tmp_path / "set"
    make_task(source, "shell", toml='\n[environment]\nenv = { GREETING = "hello" }\n', files={"seed.txt": "seed\n"})
    world_id = sealed_world(api, store, source, "shell")
    with open_session(store, world_id) as session:
        where = session.run('pwd; ls; echo "$GREETING"', 10)
        assert (where.exit_code, where.output) == (0, "/app\nseed.txt\nhello\n")
        mixed = session.run("echo out; echo err >&2; echo again; exit 3", 10)
        assert mixed.exit_code == 3 and not mixed.timed_out
        assert mixed.output.splitlines() == ["out", "err", "again"], "stdout and stderr in the order they came"
        assert session.run("echo made > made.txt && mkdir -p /tmp/x", 10).exit_code == 0
        assert session.run("cat made.txt; ls /tmp", 10).output == "made\nx\n", "a command's writes stay for the next"
        assert session.run("touch /etc/nope", 10).exit_code != 0, "nothing but the volumes is writable"
        (pod,) = api.names("Pod")
        claim = api.get("Pod", pod)["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert not (api.storage / "snapshots" / world_snapshot_name(world_id) / "made.txt").exists(), "the seal untouched"
    assert api.names("Pod") == [] and api.names("PersistentVolumeClaim") == [], "pod and fork deleted at the end"
    assert not (api.storage / "pvcs" / claim).exists()
    assert all(pod_name == pod for pod_name, _ in api.execs)


def test_a_task_naming_a_docker_image_runs_in_a_pod_on_that_image_and_a_plain_task_on_the_deployments(
    api, store, tmp_path
):
    source = tmp_path / "set"
    image = f'\n[environment]\ndocker_image = "{PYTHON_TASK_IMAGE}"\n'
    make_task(source, "pulled", toml=image, files={"seed.txt": "pulled\n"})
    make_task(source, "plain", files={"seed.txt": "plain\n"})
    for name, expected in (("pulled", PYTHON_TASK_IMAGE), ("plain", IMAGE)):
        world_id = sealed_world(api, store, source, name)
        with open_session(store, world_id) as session:
            (pod,) = api.names("Pod")
            assert api.get("Pod", pod)["spec"]["containers"][0]["image"] == expected
            assert session.run("cat seed.txt", 10).output == f"{name}\n", "the task's own world in its pod"
    created = [call.body["spec"]["containers"][0]["image"] for call in api.calls_of("POST", "Pod")]
    assert created == [PYTHON_TASK_IMAGE, IMAGE]
    assert api.names("Pod") == []


def test_a_command_is_killed_at_its_timeout_and_its_output_capped(api, store, tmp_path):
    make_task(tmp_path / "set", "slow")
    world_id = sealed_world(api, store, tmp_path / "set", "slow")
    with open_session(store, world_id) as session:
        slow = session.run("echo started; sleep 60; echo never", 1)
        assert slow.timed_out and slow.exit_code is None and slow.output == "started\n"
        assert 1 <= slow.seconds < 30
        loud = session.run("head -c 200000 /dev/zero | tr '\\0' a; echo; echo END", 10)
        assert loud.exit_code == 0 and loud.truncated
        assert len(loud.output) < OUTPUT_BYTES + 100 and loud.output.endswith("END\n")
        assert f"[... {200_005 - OUTPUT_BYTES} bytes of output cut ...]" in loud.output  # 200000 a, \\n, END\\n
        assert session.run("exit 124", 10).exit_code == 124, "a quick 124 is the command's own, not a timeout"


def test_the_tests_are_not_visible_before_verification_and_what_the_agent_plants_is_gone(api, store):
    world_id = sealed_world(api, store, EXAMPLES, "hidden-test")
    solve = (EXAMPLES / "hidden-test" / "solution" / "solve.sh").read_text()
    with open_session(store, world_id) as session:
        looked = session.run("ls -A /tests /logs; cat /tests/test_slug.py 2>&1; echo done", 10)
        assert looked.output.splitlines() == [
            "/logs:",
            "",
            "/tests:",
            "cat: /tests/test_slug.py: No such file or directory",
            "done",
        ]
        planted = "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && printf 'exit 0' > /tests/test.sh"
        assert session.run(planted + " && echo 'import sys; sys.exit(0)' > /tests/conftest.py", 10).exit_code == 0
        unsolved = session.verify("")
        assert unsolved.reward == 0.0, "the planted reward and test script were wiped before the real tests came"
        assert session.run(solve, 30).exit_code == 0
        solved = session.verify("")
        assert solved.reward == 1.0 and solved.rewards == {"reward": 1.0}
    tests_copied = [i for i, (_, command) in enumerate(api.execs) if "tar -x" in " ".join(command)]
    agent_runs = [i for i, (_, command) in enumerate(api.execs) if command[:1] == ["timeout"]]
    assert len(tests_copied) == 2 and tests_copied[0] > agent_runs[1], "tests arrive only at verification"
    assert api.names("Pod") == []


def test_a_reward_json_is_read_with_the_same_parsing_as_locally(api, store, tmp_path):
    test_sh = '#!/bin/bash\necho checking\nprintf \'{"reward": 0.25, "style": 1}\' > /logs/verifier/reward.json\n'
    make_task(tmp_path / "set", "graded", test_sh=test_sh, toml='\n[verifier.env]\nLEVEL = "strict"\n')
    world_id = sealed_world(api, store, tmp_path / "set", "graded")
    with open_session(store, world_id) as session:
        outcome = session.verify("")
    assert (outcome.reward, outcome.rewards, outcome.output) == (0.25, {"reward": 0.25, "style": 1.0}, "checking\n")


@pytest.mark.parametrize(
    ("test_sh", "error", "message"),
    [
        ("echo forgot", RewardFileMissing, "neither"),
        ("ln -s /etc/hostname /logs/verifier/reward.txt", RewardFileUnsafe, "not a regular file"),
        ("mkfifo /logs/verifier/reward.json", RewardFileUnsafe, "not a regular file"),
        ("echo started; sleep 60", VerifierTimeout, "ran past 1s"),
    ],
)
def test_a_verifier_without_a_usable_reward_fails_as_locally(api, store, tmp_path, test_sh, error, message):
    path = make_task(tmp_path / "set", "broken", test_sh=f"#!/bin/bash\n{test_sh}\n")
    (path / "task.toml").write_text('schema_version = "1.4"\n\n[verifier]\ntimeout_sec = 1.0\n')
    world_id = sealed_world(api, store, tmp_path / "set", "broken")
    with open_session(store, world_id) as session, pytest.raises(error, match=message) as failed:
        session.verify("")
    if error is VerifierTimeout:
        assert failed.value.output == "started\n"
    assert api.names("Pod") == [] and api.names("PersistentVolumeClaim") == []


def test_the_pod_and_fork_are_deleted_when_the_trial_fails_and_a_killed_attempts_pod_first(api, store, tmp_path):
    make_task(tmp_path / "set", "crash")
    world_id = sealed_world(api, store, tmp_path / "set", "crash")
    with pytest.raises(RuntimeError, match="the agent's loop failed"), open_session(store, world_id, attempt=1):
        raise RuntimeError("the agent's loop failed")
    assert api.names("Pod") == [] and api.names("PersistentVolumeClaim") == []
    left = open_session(store, world_id, attempt=2)
    left.__enter__()  # a worker killed mid-trial: nothing ran its exit
    (orphan,) = api.names("Pod")
    with open_session(store, world_id, attempt=3) as session:
        assert orphan not in api.names("Pod") and session.run("true", 5).exit_code == 0
    assert api.names("Pod") == []


class MemorySeals:
    """The seal store (Postgres on a cluster, :class:`~rl_assets.stores.world_seals.WorldSeals`) in memory."""

    def __init__(self) -> None:
        self.seals: dict[str, tuple[str, str]] = {}

    @contextmanager
    def building(self, world_id: str) -> Iterator[None]:
        yield

    def get(self, world_id: str) -> str | None:
        return self.seals[world_id][0] if world_id in self.seals else None

    def record(self, world_id: str, content_hash: str, snapshot: str) -> None:
        self.seals.setdefault(world_id, (content_hash, snapshot))


def test_a_task_world_is_built_at_the_root_of_the_build_volume_so_its_pod_finds_it_at_the_workdir(
    api, store, tmp_path, monkeypatch
):
    source = tmp_path / "set"
    task_dir = make_task(source, "built", files={"notes.txt": "seed\n"})
    (task_dir / "environment" / "src").mkdir()
    (task_dir / "environment" / "src" / "app.py").write_text("print('hi')\n")
    world_id = record_task_set(source, Path(store.home) / "tasks", on_kubernetes=True)["built"]
    recorded = Path(store.home) / "tasks" / world_id / "environment"
    build_pod = "dagster-run-0123abcd-x7k2p"
    claim = world_build_claim_name(build_pod)  # the run worker's ephemeral volume, mounted at WORLD_MOUNT
    api.seed(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"},
        }
    )
    volume = api.storage / "pvcs" / claim
    (volume / ".build-0dead").mkdir(parents=True)
    (volume / "partial.txt").write_text("a crashed build's\n")
    monkeypatch.setattr(k8s_world_store, "WORLD_MOUNT", str(volume))
    monkeypatch.setenv(POD_NAME_ENV, build_pod)
    seals = MemorySeals()
    monkeypatch.setattr(k8s_world_store, "_seals", lambda: nullcontext(seals))

    digest, built = store.ensure_built(world_id)
    assert built and digest == tree_hash(recorded), "the seal is the hash of the task's environment/ files"
    assert seals.seals == {world_id: (digest, world_snapshot_name(world_id))}
    files = sorted(p.relative_to(volume).as_posix() for p in volume.rglob("*"))
    assert files == ["notes.txt", "src", "src/app.py"], "at the volume's root: no staging directory, no leftover"
    assert not (recorded / "notes.txt").stat().st_mode & stat.S_IWUSR, "the home's snapshot is read-only"
    assert (volume / "notes.txt").stat().st_mode & stat.S_IWUSR, "the world's files are the agent's to edit"
    (snapshot,) = api.calls_of("POST", "VolumeSnapshot")
    assert snapshot.body["spec"]["source"] == {"persistentVolumeClaimName": claim}
    assert store.ensure_built(world_id) == (digest, False), "sealed: not built again"

    with open_session(store, world_id) as session:
        seen = session.run("pwd; find . -type f | sort; cat src/app.py; echo more >> notes.txt && cat notes.txt", 10)
    assert (seen.exit_code, seen.output) == (0, "/app\n./notes.txt\n./src/app.py\nprint('hi')\nseed\nmore\n")
    assert (api.storage / "snapshots" / world_snapshot_name(world_id) / "notes.txt").read_text() == "seed\n"


def test_capped_output_keeps_head_and_tail_across_frames():
    out = CappedOutput(limit=8)
    for chunk in (b"ab", b"cdef", b"ghij", b"kl"):
        out.add(chunk)
    assert (out.head, out.tail, out.cut) == (b"abcd", b"ijkl", 4)
    assert out.text() == "abcd\n[... 4 bytes of output cut ...]\nijkl"
