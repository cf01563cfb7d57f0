"""The repository's dagster.yaml and the one a local home writes agree on storage."""

import subprocess
import sys
from pathlib import Path

import dagster as dg
import sqlalchemy
import sqlalchemy.pool
import yaml
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage

from rl_assets.home.services.local_deployment import DAGSTER_YAML

ROOT = Path(__file__).resolve().parents[1]
STORAGES = ("run_storage", "event_log_storage", "schedule_storage")


def test_home_and_repo_instance_configs_agree():
    repo = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    home = yaml.safe_load(DAGSTER_YAML)
    assert repo == home
    assert repo["run_storage"]["config"]["postgres_db"]["scheme"] == "postgresql+psycopg2"
    assert {repo[s]["config"]["postgres_db"]["db_name"]["env"] for s in STORAGES} == {"DAGSTER_PG_DB"}


def test_local_home_uses_postgres_not_sqlite(home, instance):
    assert isinstance(instance.run_storage, PostgresRunStorage)
    assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
    assert "sqlite" not in (home / "dagster" / "dagster.yaml").read_text()


def test_storage_calls_reuse_a_connection_in_every_process_of_the_home(instance):
    """dagster-postgres alone opens a connection for each call; the home's storages keep theirs."""
    opened = []

    def count(*_: object) -> None:
        opened.append(1)

    sqlalchemy.event.listen(sqlalchemy.pool.Pool, "connect", count)
    try:
        for _ in range(20):
            instance.get_runs_count()
            instance.get_latest_storage_id_by_partition(
                dg.AssetKey("weights"), dg.DagsterEventType.ASSET_MATERIALIZATION, partitions={"none/s0"}
            )
    finally:
        sqlalchemy.event.remove(sqlalchemy.pool.Pool, "connect", count)
    assert len(opened) <= 2, f"{len(opened)} connections opened for 40 calls"


def test_the_drivers_sensor_ticks_are_purged_not_kept_forever(instance):
    """Dagster keeps a sensor's successful ticks forever by default; the driver's tick every few seconds."""
    purge = instance.get_settings("retention")["sensor"]["purge_after_days"]
    assert purge == {"skipped": 1, "success": 14, "failure": 60}


def test_the_run_workers_forkserver_preloads_every_storage_module_of_the_instance():
    """A worker forked from the warm forkserver builds its instance from dagster.yaml; a storage module the
    forkserver did not import is imported by every run again (dagster-postgres: 0.3 s a trial run)."""
    config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    modules = sorted({config[storage]["module"] for storage in STORAGES})
    assert "rl_assets.instance.pooled_storage" in modules
    probe = f"import sys, rl_assets.instance.warm; print([m for m in {modules!r} if m not in sys.modules])"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout


def test_the_forkserver_freezes_what_it_loaded_so_no_worker_collects_it():
    """Every object the forkserver built (the modules, the definitions) is out of the cycle collector's reach in
    the workers it forks: walked on each full collection, they were a quarter of a 256-trial rollout worker's CPU."""
    probe = "import gc, rl_assets.instance.warm; print(gc.get_freeze_count(), len(gc.get_objects()))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    frozen, tracked = (int(n) for n in proc.stdout.split())
    assert frozen > 100_000 and tracked < 1_000, proc.stdout


MODEL_CLIENT_PROBE = """
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import rl_assets.instance.warm

ANSWER = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [{"index": 0,
    "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}]}).encode()

class Answer(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
threading.Thread(target=server.serve_forever, daemon=True).start()
before = set(sys.modules)
from rl_assets.domain.transcripts import Message
from rl_assets.workloads.harbor.client import ChatClient, ChatEndpoint
client = ChatClient(ChatEndpoint(base_url=f"http://127.0.0.1:{server.server_port}/v1", model="m"))
assert client.complete([Message(role="user", content="hello")]).message.content == "hi"
print(sorted(set(sys.modules) - before))
"""


def test_the_forkserver_preloads_the_model_client_a_runs_trials_use():
    """A run of trials that call a model (the task workload, the LLM judge) imports nothing as its first client is
    built and its first call answered: httpx's transport loads lazily (with anyio, trio and h11), 0.8 s of CPU a
    run."""
    proc = subprocess.run(
        [sys.executable, "-c", MODEL_CLIENT_PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert proc.stdout.strip() == "[]", proc.stdout


def test_concurrent_storage_calls_keep_their_connections_and_ask_the_schema_once(instance):
    """A rollout run's trial threads write at once: the storages open at most their pool's connections and keep
    them (a second burst opens none), and Dagster's column and table checks reach the catalog once, not on every
    call."""
    from concurrent.futures import ThreadPoolExecutor

    from rl_assets.instance.pooled_storage import CONNECTIONS

    opened, catalog = [], []

    def count(*_: object) -> None:
        opened.append(1)

    def catalog_reads(conn, cursor, statement, *_: object) -> None:
        if "pg_catalog.pg_attribute" in statement or "pg_catalog.pg_class.relname" in statement:
            catalog.append(statement)

    def burst() -> None:
        with ThreadPoolExecutor(max_workers=24) as pool:
            list(pool.map(lambda _: instance.get_runs_count(), range(96)))

    sqlalchemy.event.listen(sqlalchemy.pool.Pool, "connect", count)
    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", catalog_reads)
    try:
        burst()
        first = len(opened)
        burst()
        second = len(opened) - first
        for _ in range(20):
            assert instance.run_storage.has_run_stats_index_cols()
            assert instance.event_log_storage.has_asset_key_col("last_materialization_timestamp")
            assert instance.schedule_storage.has_instigators_table()  # read on every sensor state change
            assert instance.schedule_storage.has_secondary_index_table()
    finally:
        sqlalchemy.event.remove(sqlalchemy.pool.Pool, "connect", count)
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", catalog_reads)
    assert first <= CONNECTIONS, f"{first} connections for 24 threads"
    assert second == 0, f"a second burst opened {second} more"
    assert len(catalog) <= 4, f"{len(catalog)} catalog reads for 80 schema checks"
