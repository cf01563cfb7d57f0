"""Races between writers, each forced into its window deterministically, with real processes, Postgres and files.

- run monitoring and run retries against the driver: a failed run that Dagster will retry stays in flight
  until its retry exists, so the driver never launches the same unit beside it;
- a launcher SIGKILLed the moment its run worker exists: the worker has tagged the run itself, so the run is
  seen alive by run monitoring;
- two writers of one training step: both return the policy the ledger holds;
- artifact writes from two processes that both have pid 1 (pid namespaces, as pods sharing a volume);
- two builds of one world at once: built once;
- driver processes started one after another on one home (a restarted code server): each finds its pools.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import ClassVar

import ray
from dagster import DagsterRunStatus, RunsFilter
from pydantic import BaseModel

import rl_assets.worlds.local
from rl_assets.assets.partitions import partitions_to_add
from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Policy, Reward
from rl_assets.domain.run_tags import EXPERIMENT_TAG, PARTITION_TAG, WORKER_PID_TAG
from rl_assets.domain.runtime import Runtime
from rl_assets.driver.planner import PARENT_RUN_TAG, WILL_RETRY_TAG, Launch, plan
from rl_assets.home.layout import Home
from rl_assets.home.services.daemon import LocalDaemon
from rl_assets.home.services.processes import identity_alive
from rl_assets.resources.trainer import TrainerResource
from rl_assets.stores.artifacts import ArtifactStore
from rl_assets.stores.locks import LockSpace
from rl_assets.worlds.local import LocalWorlds
from rl_assets_testkit.kills import wait_for
from rl_assets_testkit.runs import TEST_DIE_AFTER_WORKER_START_ENV, create_run

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(steps=1, worlds=1, prompts=1, samples=1)


def _register(stores, name: str) -> ExperimentConfig:
    config = ExperimentConfig(name=name, **SMALL)
    stores.experiments.create_or_resume(config, Runtime())
    return config


def _runs(instance, name: str):
    return instance.get_runs(filters=RunsFilter(tags={EXPERIMENT_TAG: name}))


def _world_run(instance, stores, config: ExperimentConfig):
    """A run of the experiment's first unit, created as the daemon creates a requested one (partitions first)."""
    for name, keys in partitions_to_add(config, config.steps).items():
        instance.add_dynamic_partitions(name, [k for k in keys if not instance.has_dynamic_partition(name, k)])
    (launch,) = plan(instance, stores, config).launches
    return create_run(instance, launch)


def test_a_failed_run_that_dagster_will_retry_stays_in_flight_until_its_retry_exists(home, stores, instance):
    """Run monitoring fails a dead worker's run and run retries launch it again: the driver launches nothing.

    The test plays the retry daemon's part itself, so the home's daemon (left running by an earlier test's
    ``train``) is stopped first: its retry of the failed run would be a second retry, racing the test's.
    """
    LocalDaemon(Home(home)).stop()
    config = _register(stores, "race-run-retry")
    failed = _world_run(instance, stores, config)
    instance.report_run_failed(failed, "the run's worker process died")
    instance.add_run_tags(failed.run_id, {WILL_RETRY_TAG: "true"})
    assert plan(instance, stores, config).launches == [], "the pending retry is in flight"

    retry = create_run(instance, plan_launch_of(failed))
    instance.add_run_tags(retry.run_id, {PARENT_RUN_TAG: failed.run_id})
    assert plan(instance, stores, config).launches == [], "the retry itself is in flight"

    instance.report_run_failed(instance.get_run_by_id(retry.run_id), "failed again")
    instance.add_run_tags(retry.run_id, {WILL_RETRY_TAG: "false"})
    (launch,) = plan(instance, stores, config).launches
    assert (launch.job, launch.failures, launch.generation) == (failed.job_name, 2, 2), "no retry left: the driver's"


def plan_launch_of(run):
    """The launch a run was created from: the same job, partition and tags (as a retry copies them)."""
    return Launch(run.job_name, run.tags[PARTITION_TAG], {k: v for k, v in run.tags.items() if k.startswith("rl/")}, 1)


def test_a_live_run_whose_launcher_died_as_its_worker_started_is_healthy(home, stores, instance, tmp_path):
    """The worker tags the run itself before anything else: run monitoring sees it alive, not dead."""
    config = _register(stores, "race-worker-tag")
    run = _world_run(instance, stores, config)
    gate, log = tmp_path / "gate", tmp_path / "launcher.err"
    with open(log, "wb") as err:  # a file, not a pipe: the worker it leaves behind must not hold our pipe open
        launcher = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from rl_assets_testkit.runs import relaunch; relaunch({run.run_id!r}, gate={str(gate)!r})",
            ],
            env={**os.environ, TEST_DIE_AFTER_WORKER_START_ENV: "1"},
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            timeout=300,
            cwd=REPO,
        )
    assert launcher.returncode == -signal.SIGKILL, log.read_text()[-3000:]

    tagged = wait_for(
        lambda: instance.get_run_by_id(run.run_id).tags.get(WORKER_PID_TAG),
        "the worker's own pid tag on its run (its launcher never got to write one)",
        timeout=120,
    )
    assert identity_alive(tagged)
    health = instance.run_launcher.check_run_worker_health(instance.get_run_by_id(run.run_id))
    assert health.status.value == "RUNNING", health
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.STARTING

    gate.touch()  # the worker goes on to execute the run it claimed
    status = wait_for(
        lambda: (s := instance.get_run_by_id(run.run_id).status) in FINISHED and s,
        "the worker finishing its run",
        timeout=600,
    )
    assert status == DagsterRunStatus.SUCCESS, (Home(home).logs / f"run-{run.run_id}.log").read_text()[-3000:]


FINISHED = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)


class _Record(BaseModel):
    writer: str
    n: int


class _HeldTrainer(TrainerResource):
    """The real trainer, held inside its actor call until ``release`` is set: a writer caught mid-step."""

    inside: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()

    def _apply(self, *args):
        self.inside.set()
        assert self.release.wait(300)
        return super()._apply(*args)


def _reward(trial: str, doc: int, value: float) -> Reward:
    return Reward(
        trial_id=trial,
        world_id="w0",
        rubric_name="v1",
        verified=True,
        score=value - 1,
        reward=value,
        found_doc=doc,
        turns=2,
        trajectory_hash="t",
        verdict_hash="v",
    )


def _step_lock_waiters(stores) -> int:
    return int(
        stores.db.scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = %s",
            (int(LockSpace.TRAIN_STEP),),
        )
    )


def test_two_writers_of_one_training_step_both_get_the_policy_the_ledger_holds(stores):
    experiment = "race-train-step"
    address, namespace = os.environ["RL_ASSETS_RAY_ADDRESS"], os.environ["RL_ASSETS_RAY_NAMESPACE"]
    held, plain = (
        _HeldTrainer(ray_address=address, namespace=namespace),
        TrainerResource(ray_address=address, namespace=namespace),
    )
    plain._actor(experiment)  # connect this process to Ray once, before the writers' threads
    parent = Policy.initial(["w0"])
    batches = {"held": [_reward("s0-p0-n0", 3, 2.0)], "plain": [_reward("s0-p0-n0", 5, 1.0)]}
    results: dict[str, tuple] = {}

    def write(who: str, trainer: TrainerResource) -> None:
        results[who] = trainer.train_step(
            stores.training, stores.checkpoints, experiment, "v1", 0, parent, batches[who], 2.0
        )

    _HeldTrainer.inside.clear()
    _HeldTrainer.release.clear()
    first = threading.Thread(target=write, args=("held", held))
    first.start()
    assert held.inside.wait(120), "the first writer never reached its actor call"
    second = threading.Thread(target=write, args=("plain", plain))
    second.start()
    wait_for(lambda: not second.is_alive() or _step_lock_waiters(stores), "the second writer done or waiting")
    held.release.set()
    first.join(300)
    second.join(300)
    ray.shutdown()

    row = stores.training.get(experiment, "v1", 0)
    on_disk = stores.checkpoints.load(experiment, "v1", 0, expected_hash=row.policy_hash)
    for who, (policy, returned_row, _) in results.items():
        assert returned_row == row, who
        assert policy.content_hash == row.policy_hash, f"the {who} writer returned a policy the ledger does not hold"
    assert on_disk.content_hash == row.policy_hash
    assert [applied for _, _, applied in results.values()].count(True) == 1


WRITER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from pydantic import BaseModel
    from rl_assets.stores.artifacts import ArtifactStore

    class Record(BaseModel):
        writer: str
        n: int

    store = ArtifactStore(Path(sys.argv[1]))
    for n in range(int(sys.argv[3])):
        store.write("shared/record", Record(writer=sys.argv[2], n=n))
    print(os.getpid())
    """
)


def test_artifact_writers_with_the_same_pid_on_one_volume_do_not_collide(tmp_path):
    writers = [
        subprocess.Popen(
            ["unshare", "--pid", "--fork", sys.executable, "-c", WRITER, str(tmp_path), who, "1500"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for who in ("a", "b")
    ]
    outcomes = [(w.wait(timeout=300), *w.communicate()) for w in writers]
    for code, out, err in outcomes:
        assert code == 0, err[-2000:]
        assert out.strip() == "1", "each writer is pid 1 in its own pid namespace, as in a pod"
    final = ArtifactStore(tmp_path).read("shared/record", _Record)
    assert final is not None and final.n == 1499, "the last write of one writer, intact"
    assert not list((tmp_path / "shared").glob("*.tmp")), "no temp file left behind"


def test_an_artifact_write_fsyncs_the_file_then_its_directory(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    path = ArtifactStore(tmp_path).write("a/b", Policy.initial(["w0"]))
    assert len(synced) == 2 and synced[0].startswith(str(path.parent / ".b.json."))
    assert synced[1] == str(path.parent), "the rename is made durable by syncing the directory"


def _blocked_flock_on(path: Path) -> bool:
    ino = path.stat().st_ino
    return any("->" in line and "FLOCK" in line and f":{ino} " in line for line in Path("/proc/locks").open())


def test_two_builds_of_one_world_at_once_build_it_once(tmp_path, monkeypatch):
    worlds = LocalWorlds(tmp_path / "worlds", tmp_path / "forks")
    real_build = rl_assets.worlds.local.build_world
    builds: list[str] = []
    first_inside, release = threading.Event(), threading.Event()

    def held_build(world_id: str, root: Path) -> None:
        builds.append(threading.current_thread().name)
        if len(builds) == 1:
            first_inside.set()
            assert release.wait(120)
        real_build(world_id, root)

    monkeypatch.setattr(rl_assets.worlds.local, "build_world", held_build)
    results: dict[str, tuple[str, bool]] = {}

    def build(who: str) -> None:
        results[who] = worlds.ensure_built("w0")

    first = threading.Thread(target=build, args=("first",), name="first")
    first.start()
    assert first_inside.wait(60)
    second = threading.Thread(target=build, args=("second",), name="second")
    second.start()
    wait_for(
        lambda: not second.is_alive() or _blocked_flock_on(tmp_path / "worlds" / ".w0.lock"),
        "the second build done or waiting for the world's lock",
    )
    release.set()
    first.join(60)
    second.join(60)

    assert builds == ["first"], f"built by {builds}"
    digest, built_now = results["first"]
    assert built_now and results["second"] == (digest, False)
    assert worlds.audited_hash("w0") == worlds.verified_hash("w0") == digest


def test_driver_processes_started_one_after_another_each_find_their_pools(home, instance):
    """A new code server on a home whose pool rows exist plans; Dagster's own initialiser fails on such a row."""
    script = (
        "import dagster; from rl_assets.driver.sensor import _ensure_pools; "
        "_ensure_pools(dagster.DagsterInstance.get())"
    )
    for attempt in range(2):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"driver process {attempt}: {done.stderr[-2000:]}"
    assert {"rollout", "judge", "train"} <= instance.event_log_storage.get_concurrency_keys()
