"""Harbor-format task directories: the examples load, a real Harbor task.toml loads, mistakes are named.

No home is needed: parsing, validation and the oracle run (through the real task sandbox, on a temporary
fork of the task's environment) touch no Postgres, Ray or Dagster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from rl_assets.tasks.config import TaskConfig
from rl_assets.tasks.locality import BUILD_AND_PUSH, LocalFit, local_fit
from rl_assets.tasks.task import InvalidTaskError, load_task, task_dirs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "tasks"
EXAMPLE_NAMES = ["create-file", "edit-config", "fix-python-function", "hidden-test"]

HARBOR_TOML = """\
schema_version = "1.4"
source = "https://example.com/tasks"
multi_step_reward_strategy = "mean"
artifacts = ["/app/out.log", { source = "/app/results", destination = "results", exclude = ["*.tmp"] }]

[task]
name = "acme/everything"
version = "2.1.0"
description = "A task using every table of the schema"
authors = [{ name = "Jane Doe", email = "jane@example.com" }, { name = "Bot" }]
keywords = ["full", "schema"]

[metadata]
difficulty = "hard"
category = "programming"
nested = { anything = [1, "two", 3.0] }

[verifier]
timeout_sec = 120
env = { API_KEY = "sk-test" }
user = "root"
network_mode = "allowlist"
allowed_hosts = ["pypi.org", "*.example.com"]
environment_mode = "separate"

[verifier.environment]
docker_image = "acme/verifier:1"
cpus = 1

[verifier.continuous]
enabled = true
max_concurrent = 2

[[verifier.collect]]
command = "pg_dump > /app/db.sql"
service = "db"

[agent]
timeout_sec = 300.0
user = 1000
network_mode = "no-network"

[solution]
env = { API_KEY = "sk-test" }

[environment]
build_timeout_sec = 900.0
docker_image = "acme/agent:1"
os = "Linux"
cpus = 2
memory_mb = 4096
storage_mb = 10240
gpus = 1
gpu_types = ["H100", "A100"]
network_mode = "public"
env = { TOKEN = "${TOKEN:-none}" }
skills_dir = "/skills"
workdir = "/app"

[environment.tpu]
type = "v6e"
topology = "2x4"

[[environment.mcp_servers]]
name = "search"
transport = "streamable-http"
url = "http://mcp:8000/mcp"

[[environment.mcp_servers]]
name = "local"
transport = "stdio"
command = "mcp-local"
args = ["--quiet"]

[environment.healthcheck]
command = "curl -f http://localhost:8080/health"
interval_sec = 5.0
retries = 3

[[steps]]
name = "first"
min_reward = 0.5

[steps.agent]
timeout_sec = 60

[[steps]]
name = "second"
min_reward = { reward = 1.0 }
artifacts = ["/app/step.log"]
"""


def make_task(root: Path, toml: str = 'schema_version = "1.4"\n', name: str = "t") -> Path:
    """A minimal valid task directory (plain-files environment), with ``toml`` as its task.toml."""
    path = root / name
    (path / "tests").mkdir(parents=True)
    (path / "environment").mkdir()
    (path / "instruction.md").write_text("Do the thing.\n")
    (path / "task.toml").write_text(toml)
    (path / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (path / "environment" / "data.txt").write_text("x\n")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(InvalidTaskError) as err:
        load_task(path)
    return err.value.problems


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_example_task_loads_and_runs_locally(name):
    task = load_task(EXAMPLES / name)
    assert task.name == f"rl-assets/{name}"
    assert task.config.schema_version == "1.4" and task.config.verifier.timeout_sec == 60
    assert task.environment_kind == "files" and task.environment_files and task.has_solution
    assert task.instruction.strip()
    assert local_fit(task) == LocalFit(ignored=(), refusals=())
    assert [p.name for p in task_dirs(EXAMPLES)] == EXAMPLE_NAMES


def test_a_real_shaped_harbor_task_toml_with_every_section_loads(tmp_path):
    path = make_task(tmp_path, HARBOR_TOML)
    for step in ("first", "second"):  # a multi-step task: each step has its instruction
        (path / "steps" / step).mkdir(parents=True)
        (path / "steps" / step / "instruction.md").write_text(f"Step {step}.\n")
    task = load_task(path)
    config = task.config
    assert config.task.name == "acme/everything" and config.task.authors[0].email == "jane@example.com"
    assert config.metadata["nested"] == {"anything": [1, "two", 3.0]}
    assert config.verifier.timeout_sec == 120.0 and config.verifier.separate
    assert config.verifier.environment.docker_image == "acme/verifier:1"
    assert config.agent.user == 1000 and config.agent.network_mode == "no-network"
    assert config.environment.os == "linux" and config.environment.tpu.topology == "2x4"
    assert [s.transport for s in config.environment.mcp_servers] == ["streamable-http", "stdio"]
    assert config.solution.env == {"API_KEY": "sk-test"}
    assert [s.name for s in config.steps] == ["first", "second"] and config.steps[1].min_reward == {"reward": 1.0}
    assert task.environment_kind == "image"


def test_defaults_are_harbors(tmp_path):
    config = load_task(make_task(tmp_path, "")).config
    assert config.verifier.timeout_sec == 600.0 and config.agent.timeout_sec is None
    assert config.environment.build_timeout_sec == 600.0 and config.environment.effective_network_mode == "public"
    assert TaskConfig.model_validate({"version": "1.0"}).schema_version == "1.0"  # Harbor's older key


@pytest.mark.parametrize(
    "toml, expected",
    [
        ("[verifier]\ntimeout = 10\n", "task.toml: [verifier] timeout: not a key of Harbor's task.toml schema"),
        ("colour = 'red'\n", "task.toml: colour: not a key of Harbor's task.toml schema"),
        ("[environment.tpu]\ntype = 'v6e'\ntopology = '2x4'\nchips = 8\n", "task.toml: [environment.tpu] chips:"),
        (
            "[verifier]\ntimeout_sec = 'ten'\n",
            "task.toml: [verifier] timeout_sec: Input should be a valid number, unable to parse string as a number "
            "(got 'ten')",
        ),
        ("[environment]\ngpus = 'many'\n", "task.toml: [environment] gpus: Input should be a valid integer"),
        ("[environment]\nnetwork_mode = 'lan'\n", "task.toml: [environment] network_mode: Input should be"),
        ("[task]\nname = 'no-org'\n", "task.toml: [task] name: must be 'org/name'"),
        ("[task]\nversion = '1'\n", "task.toml: [task] name: Field required"),
        ("verifier = 5\n", "task.toml: verifier: must be a table (got 5)"),
        ("environment = ['a']\n", "task.toml: environment: must be a table"),
        ("[[environment.mcp_servers]]\nname = 'x'\n", "task.toml: [environment.mcp_servers[0]]: 'url' is required"),
        ("[verifier]\nallowed_hosts = ['a.com']\n", "task.toml: [verifier]: allowed_hosts is only valid"),
        ("[agent]\nuser = 1.5\n", "task.toml: [agent] user: Input should be a valid string, or Input should be"),
        ("schema_version = \n", "task.toml: not valid TOML: Invalid value (at line 1, column 18)"),
    ],
)
def test_a_bad_task_toml_is_refused_naming_file_and_key(tmp_path, toml, expected):
    path = make_task(tmp_path, toml)
    problems = problems_of(path)
    assert len(problems) == 1, problems
    assert problems[0].startswith(str(path / expected)), problems


def test_only_the_offending_value_is_echoed(tmp_path):
    secret = "sk-live-do-not-print"
    toml = f"[verifier]\nenv = {{ KEY = '{secret}' }}\ntimeout_sec = 'soon'\nextra = '{secret}'\n"
    problems = problems_of(make_task(tmp_path, toml))
    assert len(problems) == 2 and "(got 'soon')" in problems[0]
    assert not any(secret in p for p in problems), problems


@pytest.mark.parametrize(
    "remove, expected",
    [
        ("instruction.md", "instruction.md: missing"),
        ("tests/test.sh", "tests/test.sh: missing"),
        ("task.toml", "task.toml: missing"),
    ],
)
def test_a_missing_required_file_is_named(tmp_path, remove, expected):
    path = make_task(tmp_path)
    (path / remove).unlink()
    problems = problems_of(path)
    assert len(problems) == 1 and problems[0].startswith(str(path / expected)), problems


def test_the_required_files_follow_harbors_rules(tmp_path):
    windows = make_task(tmp_path, "[environment]\nos = 'windows'\n", name="windows")
    assert problems_of(windows) == [f"{windows}/tests/test.bat: missing (the verifier every task needs)"]
    steps = make_task(tmp_path, "[[steps]]\nname = 'one'\n", name="steps")
    (steps / "instruction.md").unlink()
    assert problems_of(steps) == [f"{steps}/steps/one/instruction.md: missing"]
    separate = make_task(tmp_path, "[verifier]\nenvironment_mode = 'separate'\n", name="separate")
    (separate / "tests" / "test.sh").unlink()  # a separate verifier image brings its own tests
    assert load_task(separate).config.verifier.separate
    no_env = make_task(tmp_path, name="no-env")
    shutil.rmtree(no_env / "environment")
    assert problems_of(no_env) == [f"{no_env}/environment: missing (a task's environment directory, even if empty)"]


def test_every_problem_of_a_directory_is_reported_at_once(tmp_path):
    path = make_task(tmp_path, "[verifier]\ntimeout_sec = 'x'\n[agent]\nspeed = 1\n")
    (path / "instruction.md").unlink()
    (path / "tests" / "test.sh").unlink()
    assert len(problems_of(path)) == 4


def test_settings_that_do_not_apply_locally_are_listed(tmp_path):
    toml = (
        "[environment]\ncpus = 4\nmemory_mb = 8192\ngpus = 1\ngpu_types = ['H100']\nnetwork_mode = 'no-network'\n"
        "[[environment.mcp_servers]]\nname = 's'\nurl = 'http://s/mcp'\n"
        "[environment.tpu]\ntype = 'v5e'\ntopology = '2x2'\n"
    )
    fit = local_fit(load_task(make_task(tmp_path, toml)))
    listed = " | ".join(fit.ignored)
    for key in ("cpus", "memory_mb", "gpus", "gpu_types", "tpu", "mcp_servers"):
        assert key in listed, listed
    assert "storage_mb" not in listed and "network_mode" not in listed
    assert fit.runs_locally


def test_a_network_needing_task_is_told_there_is_none_locally(tmp_path):
    fit = local_fit(load_task(make_task(tmp_path, "")))
    assert fit.ignored == ("network_mode 'public' (the local sandbox has no network)",)


@pytest.mark.parametrize(
    "setup, reason",
    [
        (
            lambda p: (p / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n"),
            "environment/Dockerfile: runs in a container, and no container runtime is here: install Podman",
        ),
        (
            lambda p: [
                (p / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n"),
                (p / "environment" / "docker-compose.yaml").write_text("services:\n  main: {}\n"),
            ],
            "environment/docker-compose.yaml: runs in a container",
        ),
        (
            lambda p: (p / "task.toml").write_text("[environment]\ndocker_image = 'a/b:1'\n"),
            "docker_image 'a/b:1': runs in a container, and no container runtime is here",
        ),
        (
            lambda p: [
                (p / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n"),
                (p / "task.toml").write_text("[environment]\ndocker_image = 'a/b:1'\n"),
            ],
            "environment/Dockerfile: runs in a container",
        ),
        (
            lambda p: [
                (p / "task.toml").write_text("[environment]\nos = 'windows'\n"),
                (p / "tests" / "test.bat").touch(),
            ],
            "os 'windows'",
        ),
        (lambda p: (p / "task.toml").write_text("[verifier]\nenvironment_mode = 'separate'\n"), "separate verifier"),
    ],
)
def test_a_task_needing_an_image_or_more_is_refused_locally_naming_why(tmp_path, setup, reason):
    path = make_task(tmp_path)
    setup(path)
    fit = local_fit(load_task(path))
    assert not fit.runs_locally and len(fit.refusals) == 1 and reason in fit.refusals[0], fit.refusals


def test_with_a_container_runtime_an_image_task_runs_locally_in_a_container(tmp_path):
    path = make_task(tmp_path, "[environment]\nstorage_mb = 2048\nnetwork_mode = 'no-network'\n")
    (path / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    fit = local_fit(load_task(path), containers=True)
    assert fit.runs_locally and fit.ignored == ("storage_mb (a container's disk is not capped locally)",)


NO_CONTAINERS = {**os.environ, "RL_ASSETS_CONTAINER_RUNTIME": "/nonexistent/podman"}
"""The environment of a machine without a container runtime (whatever this one has)."""


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rl_assets.cli", "tasks", "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_cli_checks_the_example_set_and_every_solution_reaches_reward_1():
    proc = cli(str(EXAMPLES))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = ["task", "version", "environment", "verifier", "timeout", "solution", "reward", "seconds", "notes"]
    assert lines[0].split() == header
    for name in EXAMPLE_NAMES:
        (row,) = [line.split() for line in lines if line.startswith(f"rl-assets/{name} ")]
        assert row[:6] == [f"rl-assets/{name}", "1.0.0", "files", "60s", "yes", "1.0"], row
        assert 0 < float(row[6]) < 10 and row[7:] == ["-"]
    assert lines[-1] == "4 valid, 0 invalid task(s); oracle: 4 of 4 solution(s) reach reward 1"
    assert cli(str(EXAMPLES / "hidden-test")).returncode == 0  # one task directory is a set of one


def test_the_learnable_set_is_graded_on_the_agents_final_answer():
    """``examples/learnable``'s verifiers read ``/logs/agent/answer.txt``: the oracle's printed answer scores 1."""
    learnable = EXAMPLES.parent / "learnable"
    proc = cli(str(learnable))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "2 valid, 0 invalid task(s); oracle: 2 of 2 solution(s) reach reward 1"


@pytest.mark.parametrize(
    "breakage, failure",
    [
        ("echo wrong > greeting.txt", "oracle reward 0.0, not 1 (solve.sh: exit 0)"),
        ("exit 7", "oracle reward 0.0, not 1 (solve.sh: exit 7)"),
    ],
)
def test_a_broken_solution_fails_the_check(tmp_path, breakage, failure):
    task = shutil.copytree(EXAMPLES / "create-file", tmp_path / "create-file")
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{breakage}\n")
    proc = cli(str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr == f"rl-assets/create-file: {failure}\n"
    assert "oracle: 0 of 1 solution(s) reach reward 1" in proc.stdout


def test_a_failing_verifier_fails_the_check_naming_the_error(tmp_path):
    task = shutil.copytree(EXAMPLES / "create-file", tmp_path / "create-file")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho no reward written\n")
    proc = cli(str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.startswith("rl-assets/create-file: oracle: RewardFileMissing: the verifier wrote neither")
    assert proc.stdout.splitlines()[1].split()[5] == "error"


def test_a_task_without_a_solution_is_validated_only(tmp_path):
    make_task(tmp_path, '[task]\nname = "acme/plain"\n[environment]\nnetwork_mode = "no-network"\n')
    proc = cli(str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    row = proc.stdout.splitlines()[1]
    assert row.split()[4:] == ["no", "-", "-", "no", "solution:", "validated", "only"]
    assert proc.stdout.splitlines()[-1].endswith(
        "oracle: 0 of 0 solution(s) reach reward 1, 1 without a solution (validated only)"
    )


def test_the_oracle_leaves_no_process_mount_cgroup_or_directory(tmp_path, monkeypatch):
    from rl_assets.sandbox.limits import CGROUP_ROOT, PREFIX
    from rl_assets.sandbox.task_trial import run_oracle
    from rl_assets.sandbox.zygote import Zygote

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = _processes()
    run = run_oracle(load_task(EXAMPLES / "fix-python-function"))
    assert run.reward == 1.0 and run.error is None and run.solve == "exit 0"
    zygotes = {z.proc.pid for z in Zygote._by_interpreter.values()}  # the process's, forking keepers: not the attempt's
    assert _processes() - zygotes == before - zygotes, "no process of the attempt is left"
    assert all(not psutil.Process(pid).children() for pid in zygotes), "the zygote's keeper is gone"
    assert not any("rl-assets-" in line for line in Path("/proc/self/mountinfo").read_text().splitlines())
    assert not [p for c in ("pids", "memory", "cpu") for p in (CGROUP_ROOT / c).glob(f"{PREFIX}{os.getpid()}-*")]
    assert list(tmp_path.iterdir()) == [], "the temporary world and fork are removed"


def _processes() -> set[int]:
    """This process's descendants."""
    children: dict[int, set[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, set()).add(int(entry))
    found, todo = set(), [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.add(child)
            todo.append(child)
    return found


def test_cli_names_each_problem_of_a_bad_set_and_exits_1(tmp_path):
    shutil.copytree(EXAMPLES / "create-file", tmp_path / "create-file")
    bad = make_task(tmp_path, "[verifier]\ntimeout_sec = 'ten'\n[agent]\nspeed = 2\n", name="bad")
    (bad / "tests" / "test.sh").unlink()
    docker = make_task(tmp_path, name="docker")
    (docker / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    proc = cli(str(tmp_path), env=NO_CONTAINERS)
    assert proc.returncode == 1
    assert sorted(proc.stderr.splitlines()) == sorted(
        [
            f"{bad}/task.toml: [verifier] timeout_sec: Input should be a valid number, unable to parse string as a "
            "number (got 'ten')",
            f"{bad}/task.toml: [agent] speed: not a key of Harbor's task.toml schema",
            f"{bad}/tests/test.sh: missing (the verifier every task needs)",
        ]
    )
    assert "rl-assets/create-file" in proc.stdout and "1 invalid" in proc.stdout
    refused = [line for line in proc.stdout.splitlines() if line.startswith("refused")]
    assert refused == [
        "refused locally: docker: environment/Dockerfile: runs in a container, and no container runtime is here: "
        "install Podman (Debian/Ubuntu: apt-get install podman runc)",
        f"refused on Kubernetes too: docker: {BUILD_AND_PUSH}",
    ], "a Dockerfile alone runs nowhere: not said to run on Kubernetes"


def test_cli_says_a_task_runs_on_kubernetes_only_when_kubernetes_takes_it(tmp_path):
    make_task(tmp_path, 'schema_version = "1.4"\n[environment]\ndocker_image = "a/b:1"\n', name="pulled")
    collect = '[[verifier.collect]]\ncommand = "pg_dump app"\nservice = "db"\n'
    make_task(tmp_path, f'schema_version = "1.4"\n{collect}', name="collects")
    proc = cli(str(tmp_path), env=NO_CONTAINERS)
    assert proc.returncode == 1, "a task that cannot run here fails the check"
    refused = [line for line in proc.stdout.splitlines() if line.startswith("refused")]
    assert refused == [
        "refused locally: collects: [[verifier.collect]]: compose services are not supported (locally or on "
        "Kubernetes)",
        "refused on Kubernetes too: collects: [[verifier.collect]]: compose services are not run on Kubernetes yet",
        "refused locally (runs on Kubernetes with its image): pulled: [environment] docker_image 'a/b:1': runs in "
        "a container, and no container runtime is here: install Podman (Debian/Ubuntu: apt-get install podman runc)",
    ]
    assert proc.stdout.splitlines()[-1].endswith("2 refused locally")


def test_cli_refuses_a_dir_that_is_not_one(tmp_path):
    assert cli(str(tmp_path)).stderr == f"rl-assets: error: DIR: no task directories in {tmp_path}\n"
    proc = cli(str(tmp_path / "nope"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"rl-assets: error: DIR: not a directory: {tmp_path / 'nope'}"
    ]
