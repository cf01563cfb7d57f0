"""World volumes and rollout pods against a FAKE Kubernetes API (tests/fakes/kube_api.py).

The real ``kubernetes`` client talks HTTP to a fake server on loopback that
checks every created object against the API schema (kubernetes-validate for
PVCs and Pods, the CRD schema for VolumeSnapshots) and answers 422 for an
invalid one. What the fake cannot show: that a real CSI driver clones and
binds (see deploy/README.md for the cluster run).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.clock import FakeClock
from fakes.kube_api import FakeKubeApi, PodScript, serve
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rl_assets.kubernetes import RolloutPods, WorldNotSealedError, WorldVolumes, rollout_pod
from rl_assets.kubernetes.names import (
    OWNER_LABEL,
    fork_claim_name,
    owner_value,
    rollout_pod_name,
    world_build_claim_name,
    world_snapshot_name,
)

NS = "rl-assets"
PVC, SNAP, POD = "PersistentVolumeClaim", "VolumeSnapshot", "Pod"
BUILD_CLAIM = world_build_claim_name("dagster-run-0123abcd-x7k2p")
"""The ephemeral PVC of a world build's run worker pod."""


@pytest.fixture
def api() -> FakeKubeApi:
    return FakeKubeApi()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api_client(api: FakeKubeApi) -> Iterator[client.ApiClient]:
    with serve(api) as api_client:
        yield api_client
    assert api.rejected == [], "the code under test sent bodies the API schema rejects"


def volumes(api_client: client.ApiClient, clock: FakeClock, timeout_s: float = 30.0) -> WorldVolumes:
    return WorldVolumes(
        client.CoreV1Api(api_client),
        client.CustomObjectsApi(api_client),
        namespace=NS,
        storage_class="rl-assets-worlds",
        snapshot_class="rl-assets-worlds",
        waiting=clock.waiting(timeout_s),
    )


def sealed(api: FakeKubeApi, world_id: str = "w0") -> None:
    """The state after a world was built and snapshotted."""
    api.seed(
        {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": SNAP,
            "metadata": {"name": world_snapshot_name(world_id)},
            "spec": {"source": {"persistentVolumeClaimName": BUILD_CLAIM}},
            "status": {"readyToUse": True, "restoreSize": "2Gi"},
        }
    )


def leftover_fork(api: FakeKubeApi, attempt: int) -> str:
    name = fork_claim_name("ref", "s0-p1-n0", attempt)
    api.seed(
        {
            "apiVersion": "v1",
            "kind": PVC,
            "metadata": {"name": name, "labels": {OWNER_LABEL: owner_value("ref", "s0-p1-n0")}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
        }
    )
    return name


def test_fake_api_rejects_bodies_the_schema_rejects(api: FakeKubeApi, api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    with pytest.raises(ApiException) as bad_pvc:
        core.create_namespaced_persistent_volume_claim(
            NS, {"apiVersion": "v1", "kind": PVC, "metadata": {"name": "x"}, "spec": {"sizeGb": 1}}
        )
    custom = client.CustomObjectsApi(api_client)
    two_sources = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": SNAP,
        "metadata": {"name": "x"},
        "spec": {"source": {"persistentVolumeClaimName": "a", "volumeSnapshotContentName": "b"}},
    }
    with pytest.raises(ApiException) as bad_snapshot:
        custom.create_namespaced_custom_object("snapshot.storage.k8s.io", "v1", NS, "volumesnapshots", two_sources)
    assert (bad_pvc.value.status, bad_snapshot.value.status) == (422, 422)
    assert "sizeGb" in api.rejected[0] and "exactly one" in api.rejected[1]
    api.rejected.clear()  # expected here; the fixture asserts none elsewhere


def test_world_snapshot_is_taken_once_from_the_build_claim_and_awaited_ready(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    api.reads_until_snapshot_ready = 3
    store = volumes(api_client, clock)
    assert store.snapshot("w0", BUILD_CLAIM) == world_snapshot_name("w0")
    assert store.snapshot("w0", BUILD_CLAIM) == world_snapshot_name("w0")
    snapshot = api.get(SNAP, world_snapshot_name("w0"))
    assert snapshot["spec"]["source"] == {"persistentVolumeClaimName": BUILD_CLAIM}
    assert snapshot["status"]["readyToUse"] is True
    assert len(api.calls_of("POST", SNAP)) == 2 and api.names(SNAP) == [world_snapshot_name("w0")]
    assert api.calls_of("POST", PVC) == [], "the world's PVC is the build pod's ephemeral volume: nobody creates it"
    assert clock.sleeps == [1.0, 1.0], "it polled until the snapshot was ready, and not after"


def test_unready_snapshot_of_a_dead_build_pod_is_replaced_a_ready_one_kept(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    """A build pod killed after creating its snapshot leaves one whose source claim died with the pod."""
    api.reads_until_snapshot_ready = 10**6
    store = volumes(api_client, clock)
    custom = client.CustomObjectsApi(api_client)
    stale = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": SNAP,
        "metadata": {"name": world_snapshot_name("w0")},
        "spec": {"source": {"persistentVolumeClaimName": world_build_claim_name("dagster-run-0123abcd-dead1")}},
    }
    custom.create_namespaced_custom_object("snapshot.storage.k8s.io", "v1", NS, "volumesnapshots", stale)
    api.reads_until_snapshot_ready = 3
    assert store.snapshot("w0", BUILD_CLAIM) == world_snapshot_name("w0")
    assert api.get(SNAP, world_snapshot_name("w0"))["spec"]["source"] == {"persistentVolumeClaimName": BUILD_CLAIM}
    assert len(api.calls_of("DELETE", SNAP)) == 1
    assert store.snapshot("w0", world_build_claim_name("dagster-run-0123abcd-later")) == world_snapshot_name("w0")
    assert api.get(SNAP, world_snapshot_name("w0"))["spec"]["source"] == {"persistentVolumeClaimName": BUILD_CLAIM}
    assert len(api.calls_of("DELETE", SNAP)) == 1, "a ready snapshot is the seal: never replaced"


def test_fork_is_cloned_from_the_snapshot_bound_then_deleted_after_success(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    sealed(api)
    api.reads_until_bound = 2
    with volumes(api_client, clock).fork("ref", "s0-p1-n0", 0, "w0") as claim:
        assert claim == fork_claim_name("ref", "s0-p1-n0", 0)
        pvc = api.get(PVC, claim)
        assert pvc["status"]["phase"] == "Bound", "yielded only once Bound"
        assert pvc["spec"]["dataSource"] == {
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": world_snapshot_name("w0"),
        }
        assert pvc["spec"]["resources"]["requests"]["storage"] == "2Gi", "sized from the snapshot's restoreSize"
        assert pvc["spec"]["storageClassName"] == "rl-assets-worlds"
        assert pvc["metadata"]["labels"][OWNER_LABEL] == owner_value("ref", "s0-p1-n0")
    assert api.names(PVC) == []
    assert [c.name for c in api.calls_of("DELETE", PVC)] == [claim]


def test_fork_is_deleted_after_an_exception_in_the_body(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    sealed(api)
    with pytest.raises(RuntimeError, match="rollout crashed"):
        with volumes(api_client, clock).fork("ref", "s0-p1-n0", 1, "w0") as claim:
            assert api.get(PVC, claim) is not None
            raise RuntimeError("rollout crashed")
    assert api.names(PVC) == []


def test_fork_is_deleted_when_it_never_binds(api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock) -> None:
    sealed(api)
    api.bind = False
    with pytest.raises(TimeoutError, match="Bound"):
        with volumes(api_client, clock, timeout_s=5).fork("ref", "s0-p1-n0", 0, "w0"):
            pytest.fail("a fork that never bound was yielded")
    assert api.names(PVC) == []


def test_leftover_fork_of_a_killed_attempt_is_deleted_before_the_new_one_is_created(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    sealed(api)
    old = leftover_fork(api, attempt=0)
    with volumes(api_client, clock).fork("ref", "s0-p1-n0", 1, "w0") as claim:
        assert api.names(PVC) == [claim]
    mutations = [(c.method, c.name or c.body["metadata"]["name"]) for c in api.calls if c.method != "GET"]
    assert mutations[:2] == [("DELETE", old), ("POST", claim)]


def test_leftover_with_the_same_name_is_awaited_gone_before_create(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    """A re-run of the same attempt (its process died): the old claim is still Terminating for a while."""
    sealed(api)
    same = leftover_fork(api, attempt=2)
    api.reads_until_deleted = 2
    with volumes(api_client, clock).fork("ref", "s0-p1-n0", 2, "w0") as claim:
        assert claim == same
        assert "deletionTimestamp" not in api.get(PVC, claim)["metadata"], "a new claim, not the terminating one"
    seq = [(c.method, c.kind, c.name) for c in api.calls]
    delete, create = seq.index(("DELETE", PVC, same)), seq.index(("POST", PVC, None))
    assert delete < create and ("GET", PVC, same) in seq[delete:create], "polled the old claim until it was gone"


def test_fork_of_an_unsealed_world_is_refused_without_creating_anything(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    with pytest.raises(WorldNotSealedError, match="w9"):
        with volumes(api_client, clock).fork("ref", "s0-p1-n0", 0, "w9"):
            pytest.fail("forked an unsealed world")
    assert api.calls_of("POST", PVC) == []


def rollout(attempt: int = 0) -> dict:
    return rollout_pod(
        experiment="ref",
        trial_id="s0-p1-n0",
        attempt=attempt,
        fork_claim=fork_claim_name("ref", "s0-p1-n0", attempt),
        image="rl-assets:test",
        request_json='{"spec": "..."}',
    )


def test_rollout_pod_runs_to_completion_its_log_is_read_and_it_is_deleted(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    api.reads_until_pod_finished = 3
    api.pod_script = PodScript(log="turn 1\nRL_ASSETS_ROLLOUT {}\n")
    outcome = RolloutPods(client.CoreV1Api(api_client), NS, clock.waiting()).run(rollout())
    assert (outcome.phase, outcome.exit_code, outcome.log) == ("Succeeded", 0, "turn 1\nRL_ASSETS_ROLLOUT {}\n")
    assert api.names(POD) == []
    assert len(api.calls_of("POST", POD)) == 1 and len(api.calls_of("DELETE", POD)) == 1


def test_failed_rollout_pod_reports_why_and_is_deleted(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    api.pod_script = PodScript(phase="Failed", exit_code=137, reason="DeadlineExceeded")
    outcome = RolloutPods(client.CoreV1Api(api_client), NS, clock.waiting()).run(rollout())
    assert (outcome.phase, outcome.exit_code, outcome.reason) == ("Failed", 137, "DeadlineExceeded")
    assert api.names(POD) == []


def test_rollout_pod_is_deleted_when_waiting_for_it_times_out(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    api.reads_until_pod_finished = 10**6
    with pytest.raises(TimeoutError, match="finished"):
        RolloutPods(client.CoreV1Api(api_client), NS, clock.waiting(timeout_s=5)).run(rollout())
    assert api.names(POD) == []


def test_leftover_rollout_pod_of_a_killed_attempt_is_deleted_first(
    api: FakeKubeApi, api_client: client.ApiClient, clock: FakeClock
) -> None:
    api.seed(rollout(attempt=0))
    RolloutPods(client.CoreV1Api(api_client), NS, clock.waiting()).run(rollout(attempt=1))
    mutations = [(c.method, c.name or c.body["metadata"]["name"]) for c in api.calls if c.method != "GET"]
    assert mutations[:2] == [
        ("DELETE", rollout_pod_name("ref", "s0-p1-n0", 0)),
        ("POST", rollout_pod_name("ref", "s0-p1-n0", 1)),
    ]
