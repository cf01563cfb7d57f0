"""Advisory locks against the real Postgres: namespaced, never colliding across purposes, and either surviving a
server restart or failing cleanly; a call in flight across a restart stores its verdict and does not fail."""

from __future__ import annotations

import dataclasses
import threading
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

from rl_assets.domain.experiment import ExperimentConfig
from rl_assets.domain.models import Verdict
from rl_assets.domain.runtime import Runtime
from rl_assets.domain.scoring import simulated_judge
from rl_assets.home.layout import Home
from rl_assets.home.services.postgres import EmbeddedPostgres, PostgresInfo
from rl_assets.stores import migrations
from rl_assets.stores.database import Database
from rl_assets.stores.drives import DriveRequests
from rl_assets.stores.experiments import ExperimentStore
from rl_assets.stores.locks import LockKey, LockSpace, SessionLock, driver_lock, is_held
from rl_assets.stores.verdicts import DIED, VerdictLedger, verdict_lock
from rl_assets_testkit.kills import wait_for
from rl_assets_testkit.samples import RUBRIC, sample_trajectory


def _restart_postgres(home: Path) -> None:
    server = EmbeddedPostgres(Home(home))
    port = server.info().port
    assert server.stop() and not server.is_running()
    server.ensure_running()
    assert server.info().port == port


def _statuses(db: Database, experiment: str) -> list[tuple[str, str | None]]:
    with db.transaction() as cur:
        cur.execute("SELECT status, cause FROM rl_judge_calls WHERE experiment = %s ORDER BY id", (experiment,))
        return cur.fetchall()


def _new_experiment(stores, name: str | None = None) -> str:
    name = name or f"locks-{uuid.uuid4().hex[:8]}"
    stores.experiments.create_or_resume(ExperimentConfig(name=name, steps=1, worlds=1, prompts=1, samples=1), Runtime())
    return name


def _driver_lock(stores, experiment: str) -> LockKey:
    with stores.db.transaction() as cur:
        return driver_lock(cur, experiment)


@pytest.fixture
def sessions() -> Iterator[list[SessionLock]]:
    """Session locks made by a test, closed at its end whatever happened."""
    made: list[SessionLock] = []
    yield made
    for lock in made:
        lock.close()


def _session(sessions: list[SessionLock], lock: LockKey) -> SessionLock:
    sessions.append(SessionLock(PostgresInfo.from_env(), lock))
    return sessions[-1]


def test_a_verdict_lock_and_a_driver_lock_never_collide(stores, sessions):
    """By construction: the purpose is the lock's first int, so equal second ints are different locks."""
    assert len({space.value for space in LockSpace}) == len(LockSpace.__members__), "one space per purpose"
    experiment = _new_experiment(stores)
    driver = _driver_lock(stores, experiment)
    verdict = verdict_lock(f"{experiment}:some-verdict")
    assert (driver.space, verdict.space) == (LockSpace.DRIVER, LockSpace.VERDICT)
    same_key_as_driver = LockKey(LockSpace.VERDICT, driver.key)
    assert _session(sessions, driver).acquire(0)
    assert _session(sessions, same_key_as_driver).acquire(0), "a verdict lock with the driver's key is its own lock"
    assert not _session(sessions, driver).acquire(0), "the driver lock itself is taken"
    with stores.db.transaction() as cur:
        assert is_held(cur, driver) and is_held(cur, same_key_as_driver)
        assert not is_held(cur, LockKey(LockSpace.JUDGE_RATE, driver.key))


def test_experiments_whose_names_share_a_crc32_each_get_their_own_driver(stores, sessions):
    """A 32-bit hash of the name would refuse one of these two drivers; the experiment's serial key does not."""
    names = ["0xyf3rpz5c", "ga87t0m5rv"]
    assert len({zlib.crc32(f"driver:{n}".encode()) for n in names}) == 1, "the names collide under the old scheme"
    for name in names:
        _new_experiment(stores, name)
    keys = [_driver_lock(stores, name) for name in names]
    assert keys[0] != keys[1]
    assert all(_session(sessions, key).acquire(0) for key in keys), "both drivers hold their lock at once"


def test_a_driver_lock_is_taken_again_after_a_restart_and_refused_if_another_took_it(home, stores, sessions):
    key = _driver_lock(stores, _new_experiment(stores))
    holder, rival = _session(sessions, key), _session(sessions, key)
    assert holder.hold() and not rival.acquire(0)

    _restart_postgres(home)
    assert holder.hold(), "the restart dropped the lock with its connection; it is taken again"
    assert not rival.acquire(0)

    with stores.db.transaction() as cur:  # the holder's connection is lost again, and a rival is quicker this time
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
            "AND classid = %s::bigint::oid AND objid = %s::bigint::oid",
            (key.space, key.key % 2**32),
        )
    wait_for(lambda: rival.acquire(0), "the rival to take the lock")
    assert not holder.hold(), "the holder learns it lost the lock instead of believing it still holds it"
    holder.release()  # releasing a lock that is not held is not an error


def _judging_in_thread(key: str, experiment: str, call) -> tuple[threading.Thread, dict]:
    """``judge_once`` on a ledger of its own (as another process would), in a thread; its outcome in the dict."""
    outcome: dict = {}
    ledger = VerdictLedger(Database(PostgresInfo.from_env()))

    def judging() -> None:
        try:
            outcome["result"] = ledger.judge_once(key, experiment, "t", call, timeout_s=300)
        except BaseException as err:
            outcome["error"] = err
        finally:
            ledger.db.close()

    thread = threading.Thread(target=judging)
    thread.start()
    return thread, outcome


def test_a_call_in_flight_across_a_postgres_restart_stores_its_verdict_and_does_not_fail(home, stores):
    experiment = f"restart-{uuid.uuid4().hex[:8]}"
    stored_before, in_flight = sample_trajectory(), sample_trajectory()
    before_key, key = f"{experiment}:before", f"{experiment}:in-flight"
    stores.verdicts.judge_once(before_key, experiment, "t", lambda: simulated_judge(stored_before, RUBRIC))
    release = threading.Event()

    def slow() -> Verdict:
        release.wait(120)
        return simulated_judge(in_flight, RUBRIC)

    thread, outcome = _judging_in_thread(key, experiment, slow)
    wait_for(lambda: _statuses(stores.db, experiment) == [("done", None), ("claimed", None)], "the call claimed")
    _restart_postgres(home)
    release.set()
    thread.join(timeout=300)
    assert "error" not in outcome, f"the step failed after its verdict was stored: {outcome['error']!r}"
    assert outcome["result"] == (simulated_judge(in_flight, RUBRIC), False)
    assert stores.verdicts.get(key) == simulated_judge(in_flight, RUBRIC)
    assert stores.verdicts.judge_once(before_key, experiment, "t", lambda: pytest.fail("paid again")) == (
        simulated_judge(stored_before, RUBRIC),
        True,
    ), "a verdict stored before the restart is the result after it"
    after = sample_trajectory()  # judged through the ledger whose idle lock connection the restart dropped
    assert stores.verdicts.judge_once(
        f"{experiment}:after", experiment, "t", lambda: simulated_judge(after, RUBRIC)
    ) == (
        simulated_judge(after, RUBRIC),
        False,
    )
    assert _statuses(stores.db, experiment) == [("done", None)] * 3


def test_two_writers_of_one_key_across_a_restart_both_return_the_stored_verdict(home, stores):
    """The restart drops the first caller's lock mid-call; a second caller claims and answers first. When the
    first answer arrives it is not stored over the second, and both callers return the one stored verdict."""
    experiment = f"restart-{uuid.uuid4().hex[:8]}"
    key = f"{experiment}:race"
    first, second = simulated_judge(sample_trajectory(), RUBRIC), simulated_judge(sample_trajectory(), RUBRIC)
    assert first != second  # a real judge may well answer twice differently
    release = threading.Event()

    def slow() -> Verdict:
        release.wait(120)
        return first

    thread, outcome = _judging_in_thread(key, experiment, slow)
    wait_for(lambda: _statuses(stores.db, experiment) == [("claimed", None)], "the first call claimed")
    _restart_postgres(home)
    assert stores.verdicts.judge_once(key, experiment, "t", lambda: second, timeout_s=60) == (second, False)
    release.set()
    thread.join(timeout=300)
    assert "error" not in outcome, repr(outcome.get("error"))
    assert outcome["result"] == (second, False), "the first writer returns what is stored, not its own answer"
    assert stores.verdicts.get(key) == second
    assert _statuses(stores.db, experiment) == [("duplicate", None), ("done", DIED)]


OLD_TABLES = """
CREATE TABLE rl_experiments (
    name TEXT PRIMARY KEY, config JSONB NOT NULL, config_hash TEXT NOT NULL, faults JSONB NOT NULL DEFAULT '{}',
    forked_from TEXT, created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE rl_verdicts (
    verdict_key TEXT PRIMARY KEY, verdict JSONB NOT NULL, content_hash TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE rl_judge_calls (
    id BIGSERIAL PRIMARY KEY, verdict_key TEXT NOT NULL, experiment TEXT NOT NULL, trial_id TEXT NOT NULL,
    status TEXT NOT NULL, cause TEXT, started_at TIMESTAMPTZ NOT NULL DEFAULT now(), finished_at TIMESTAMPTZ
);
INSERT INTO rl_experiments (name, config, config_hash) VALUES ('old-a', '{}', 'x'), ('old-b', '{}', 'y');
INSERT INTO rl_judge_calls (verdict_key, experiment, trial_id, status) VALUES ('k', 'old-a', 't', 'claimed');
"""
"""The tables as homes made before the judge-billing columns and the driver lock keys have them."""


def _upgrade_at_head_takes_no_lock(info: PostgresInfo) -> None:
    """At head, an upgrade returns without the schema lock (held here by a rival) and without an ``ALTER TABLE``."""
    rival = info.connect()
    rival.autocommit = True
    engine = sqlalchemy.create_engine("postgresql+psycopg2://", creator=info.connect, poolclass=sqlalchemy.NullPool)
    try:
        with rival.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s, %s)", migrations.SCHEMA_LOCK.args)
        done = threading.Thread(target=migrations.upgrade, args=(engine,), daemon=True)
        done.start()
        done.join(timeout=30)
        assert not done.is_alive(), "an upgrade with nothing to do waited for the schema lock"
    finally:
        rival.close()
        engine.dispose()


def test_a_home_made_before_the_new_columns_gets_them_on_first_connection(home):
    """A home made before Alembic (tables, no version table) is upgraded to head: the first revisions are idempotent."""
    info = PostgresInfo.from_env()
    scratch = dataclasses.replace(info, database=f"rl_migration_{uuid.uuid4().hex[:8]}")
    admin = EmbeddedPostgres(Home(home)).superuser().connect()  # the app role may not create databases
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {scratch.database} OWNER {info.user}")
    try:
        old = scratch.connect()
        with old, old.cursor() as cur:
            cur.execute(OLD_TABLES)
        old.close()

        db = Database(scratch)
        with db.transaction() as cur:
            keys = [driver_lock(cur, name).key for name in ("old-a", "old-b")]
        assert len(set(keys)) == 2, "existing experiments are numbered, each its own driver lock"
        ExperimentStore(db).create_or_resume(
            ExperimentConfig(name="new-c", steps=1, worlds=1, prompts=1, samples=1), Runtime()
        )
        with db.transaction() as cur:
            assert driver_lock(cur, "new-c").key not in keys
        ledger = VerdictLedger(db)
        assert ledger.billing("old-a")["outcomes"] == {DIED: 1}, "a claim left by the old code reads as it was"
        verdict, hit = ledger.judge_once("k", "old-a", "t", lambda: simulated_judge(sample_trajectory(), RUBRIC))
        assert not hit and ledger.billing("old-a")["extra_call_causes"] == {DIED: 1}
        assert {"old-a", "old-b"} <= set(DriveRequests(db).open()), "the daemon drives what a driver would have"
        assert db.scalar(f"SELECT version_num FROM {migrations.VERSION_TABLE}") == migrations.head()
        assert db.scalar("SELECT to_regclass('alembic_version')") is None, "Dagster's version table is not ours"
        db.close()
        _upgrade_at_head_takes_no_lock(scratch)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {scratch.database} WITH (FORCE)")
        admin.close()


def test_the_head_read_from_the_revision_files_is_alembics_head():
    """The schema check reads the head from the files' names, so Alembic loads only to migrate; the two must agree."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrations._config())
    assert migrations.head() == script.get_current_head()
    for revision in script.walk_revisions():
        (path,) = (Path(migrations.__file__).parent / "versions").glob(f"{revision.revision}_*.py")
        assert migrations.REVISION_FILE.match(path.name), path.name
