"""The chat agent against the stand-in model server, a real process over real HTTP, in a temp-dir shell.

Each example task is solved by a scripted answer sequence and its result checked on disk; faults the
server injects (500s, 429s with Retry-After, dropped connections) are retried by the client and leave
the transcript exactly as a clean run records it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rl_assets.domain.transcripts import Message, Transcript
from rl_assets.tasks.task import load_task
from rl_assets.workloads.harbor.agent import NOT_RUN, AgentLimits, ChatAgent
from rl_assets.workloads.harbor.client import ChatClient, ChatEndpoint, ModelCallError
from rl_assets_testkit.example_solutions import SOLUTIONS, script
from rl_assets_testkit.example_solutions import call as _call
from rl_assets_testkit.local_shell import LocalShell
from rl_assets_testkit.served_model import ServedModel

TASKS = Path(__file__).parent.parent / "examples" / "tasks"


def _python(workdir: Path, code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, check=True
    ).stdout.strip()


CHECKS: dict[str, Callable[[Path], None]] = {
    "create-file": lambda d: _equal((d / "greeting.txt").read_text(), "Hello, Harbor!\nTasks are directories.\n"),
    "edit-config": lambda d: _equal(
        json.loads((d / "config.json").read_text()),
        {
            "service": "inventory",
            "server": {"host": "127.0.0.1", "port": 9090, "debug": False},
            "database": {"path": "data/inventory.db", "pool_size": 4},
            "features": ["search", "export"],
        },
    ),
    "fix-python-function": lambda d: _equal(
        _python(d, "from stats import median, mean; print(median([5, 1, 3]), median([4, 1, 3, 2]), mean([1, 3]))"),
        "3 2.5 2.0",
    ),
    "hidden-test": lambda d: _equal(_python(d, "from slug import slugify; print(slugify('  --A b!!C-- '))"), "a-b-c"),
}


def _equal(actual: object, expected: object) -> None:
    assert actual == expected


def world(name: str, tmp_path: Path) -> Path:
    """A fresh copy of the task's environment files: the agent's working directory."""
    workdir = tmp_path / "work"
    shutil.copytree(TASKS / name / "environment", workdir)
    return workdir


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], ServedModel]]:
    """Starts servers for a test's scripts, and stops every one of them however the test ends."""
    started: list[ServedModel] = []

    def start(s: dict[str, Any]) -> ServedModel:
        directory = tmp_path / f"server-{len(started)}"
        directory.mkdir()
        server = ServedModel(s, directory)
        started.append(server)
        return server.__enter__()

    yield start
    for server in started:
        server.stop()


def counts(server: ServedModel) -> tuple[dict[str, int], dict[str, int]]:
    """``(answered by model, faults by kind)`` as the server counted them."""
    stats = server.stats()
    return stats["answered"], stats["faults"]


def _user(text: str) -> Message:
    return Message(role="user", content=text)


def endpoint(server: ServedModel, **overrides: Any) -> ChatEndpoint:
    return ChatEndpoint(base_url=server.base_url, model="policy", **overrides)


def solve(name: str, server: ServedModel, tmp_path: Path, **overrides: Any) -> tuple[Transcript, ChatClient, Path]:
    workdir = world(name, tmp_path)
    with ChatClient(endpoint(server, **overrides)) as client:
        transcript = ChatAgent().run(load_task(TASKS / name).instruction, client, LocalShell(workdir))
    return transcript, client, workdir


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_the_agent_solves_each_example_task(name: str, tmp_path: Path, served) -> None:
    server = served(script())
    transcript, client, workdir = solve(name, server, tmp_path)

    CHECKS[name](workdir)
    assert transcript.ended == "no_tool_call"
    assert transcript.policy_calls == len(SOLUTIONS[name]) == client.answered
    assert counts(server) == ({"policy": len(SOLUTIONS[name])}, {})


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_a_server_as_strict_as_llama_cpp_python_is_sent_tool_choice_and_no_null_content(
    name: str, tmp_path: Path, served
) -> None:
    """llama-cpp-python ignores tools without ``tool_choice`` and refuses ``content: null`` with a 500: the
    stand-in, made as strict, gets both right from the client, and each task is solved as on a lenient server."""
    server = served({**script(), "strict": {"null_content": True, "tools_need_choice": True}})
    transcript, client, workdir = solve(name, server, tmp_path)

    CHECKS[name](workdir)
    assert transcript.policy_calls == len(SOLUTIONS[name]) == client.answered
    assert server.stats()["fields"]["tool_choice"] == len(SOLUTIONS[name])
    assert any(m.content is None and m.tool_calls for m in transcript.messages)  # recorded as answered: no text


def test_the_endpoints_sampling_settings_and_tool_choice_are_sent(tmp_path: Path, served) -> None:
    server = served(script())
    solve("create-file", server, tmp_path, max_tokens=64, temperature=0.0, top_p=0.5, tool_choice="required")
    fields = server.stats()["fields"]
    calls = len(SOLUTIONS["create-file"])
    assert {f: fields.get(f) for f in ("max_tokens", "temperature", "top_p", "tool_choice")} == dict.fromkeys(
        ("max_tokens", "temperature", "top_p", "tool_choice"), calls
    )


GREETING = "printf 'Hello, Harbor!\\nTasks are directories.\\n' > greeting.txt"
TEXT_TURNS = [
    {"content": f"I will write the file.\n```bash\n{GREETING}\n```"},
    {"content": "Two at once:\n```bash\nls\n```\n```sh\npwd\n```"},
    {"content": "Checking.\n```\ncat greeting.txt\n```"},
    {"content": "The file is written."},
]


def _text_agent(protocol: str, server: ServedModel, tmp_path: Path) -> tuple[Transcript, Path]:
    workdir = world("create-file", tmp_path)
    with ChatClient(endpoint(server)) as client:
        agent = ChatAgent(protocol=protocol)
        transcript = agent.run(load_task(TASKS / "create-file").instruction, client, LocalShell(workdir))
    return transcript, workdir


@pytest.mark.parametrize("protocol", ["text", "auto"])
def test_a_model_answering_fenced_commands_acts_by_the_text_protocol(protocol: str, tmp_path: Path, served) -> None:
    """A model without tool calling answers with fenced shell blocks (the scaffold of mini-swe-agent): each is
    run and its result is the next user message; two at once run nothing and are told so; no block ends it.
    ``text`` offers no tools; ``auto`` offers them (with tool_choice) and runs the blocks all the same."""
    server = served({"policy_model": "policy", "tasks": [{"match": "greeting.txt", "turns": TEXT_TURNS}]})
    transcript, workdir = _text_agent(protocol, server, tmp_path)

    CHECKS["create-file"](workdir)
    assert transcript.protocol == protocol and transcript.ended == "no_tool_call"
    assert [m.role for m in transcript.messages] == ["system", "user"] + ["assistant", "user"] * 3 + ["assistant"]
    observations = [m.content for m in transcript.messages[3::2]]
    assert observations[0] == "exit code 0\n" and "exactly one command block" in observations[1]
    assert observations[2] == "exit code 0\nHello, Harbor!\nTasks are directories.\n"
    fields = server.stats()["fields"]
    assert (fields.get("tools", 0), fields.get("tool_choice", 0)) == ((0, 0) if protocol == "text" else (4, 4))
    assert transcript.messages[0].content.startswith("You are an agent") and "```bash" in transcript.messages[0].content


def test_the_protocol_is_part_of_the_agents_version() -> None:
    versions = {ChatAgent(protocol=p).version for p in ("tools", "text", "auto")}
    assert len(versions) == 3 and ChatAgent().version == ChatAgent(protocol="tools").version


def test_with_tools_an_answer_without_a_call_ends_the_loop_even_with_a_block(tmp_path: Path, served) -> None:
    server = served({"policy_model": "policy", "tasks": [{"match": "greeting.txt", "turns": TEXT_TURNS}]})
    transcript, workdir = _text_agent("tools", server, tmp_path)
    assert transcript.policy_calls == 1 and transcript.protocol is None and not (workdir / "greeting.txt").exists()


def test_the_transcript_records_messages_usage_token_ids_and_logprobs(tmp_path: Path, served) -> None:
    server = served(script())
    transcript, _, _ = solve("fix-python-function", server, tmp_path)
    instruction = load_task(TASKS / "fix-python-function").instruction

    roles = [m.role for m in transcript.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"]
    assert transcript.messages[1].content == instruction
    read, write, run = (m.tool_calls[0] for m in transcript.messages if m.tool_calls)
    assert (read.name, json.loads(read.arguments)) == ("read_file", {"path": "stats.py"})
    assert write.name == "write_file" and run.name == "bash"
    tool_texts = [m.content for m in transcript.messages if m.role == "tool"]
    assert "def median(values):\n    middle = len(values) // 2" in tool_texts[0]  # the file as it was
    assert tool_texts[1].startswith("wrote ") and tool_texts[2] == "exit code 0\n2 2.5\n"
    assert [m.tool_call_id for m in transcript.messages if m.role == "tool"] == [read.id, write.id, run.id]
    assert transcript.messages[-1].content == "median fixed."

    assert [t.message_index for t in transcript.turns] == [2, 4, 6, 8]
    assert [t.finish_reason for t in transcript.turns] == ["tool_calls"] * 3 + ["stop"]
    assert transcript.has_token_ids
    for turn in transcript.turns:
        assert turn.prompt_token_ids is not None and turn.token_ids is not None and turn.logprobs is not None
        assert len(turn.prompt_token_ids) == turn.usage.prompt_tokens > 0
        assert len(turn.token_ids) == len(turn.logprobs) == turn.usage.completion_tokens > 0
        assert all(lp < 0 for lp in turn.logprobs)
    prompts = [t.prompt_token_ids for t in transcript.turns]
    assert all(len(a) < len(b) for a, b in zip(prompts, prompts[1:], strict=False))  # each call sees more
    assert transcript.usage.prompt_tokens == sum(t.usage.prompt_tokens for t in transcript.turns)
    assert transcript.usage.completion_tokens == sum(t.usage.completion_tokens for t in transcript.turns)
    assert Transcript.model_validate_json(transcript.model_dump_json()) == transcript


def test_without_token_ids_or_logprobs_asked_none_are_recorded(tmp_path: Path, served) -> None:
    server = served(script())
    transcript, _, workdir = solve("create-file", server, tmp_path, return_token_ids=False, logprobs=False)

    CHECKS["create-file"](workdir)
    assert not transcript.has_token_ids
    assert all(t.prompt_token_ids is None and t.token_ids is None and t.logprobs is None for t in transcript.turns)
    assert all(t.usage.prompt_tokens > 0 for t in transcript.turns)


def test_500s_and_429s_are_retried_and_the_transcript_is_the_clean_runs(tmp_path: Path, served) -> None:
    clean, _, _ = solve("edit-config", served(script()), tmp_path / "clean")
    faulty = served(script({"server_errors": 1, "rate_limited": 2, "retry_after_s": 0.05}))
    transcript, client, workdir = solve("edit-config", faulty, tmp_path / "faulty")

    CHECKS["edit-config"](workdir)
    assert transcript == clean and transcript.content_hash == clean.content_hash
    calls = len(SOLUTIONS["edit-config"])
    assert client.answered == transcript.policy_calls == calls
    assert counts(faulty) == ({"policy": calls}, {"server_errors": calls, "rate_limited": 2 * calls})


def test_a_dropped_connection_is_retried(tmp_path: Path, served) -> None:
    server = served(script({"dropped": 1}))
    transcript, client, workdir = solve("create-file", server, tmp_path)

    CHECKS["create-file"](workdir)
    assert client.answered == transcript.policy_calls == 2
    assert counts(server) == ({"policy": 2}, {"dropped": 2})


def test_the_client_waits_what_retry_after_says(tmp_path: Path, served) -> None:
    server = served(script({"rate_limited": 2, "retry_after_s": 0.4}))
    with ChatClient(endpoint(server)) as client:
        started = time.monotonic()
        client.complete([_user("greeting.txt")])
        waited = time.monotonic() - started
    assert waited >= 0.8  # two waits of 0.4 s each, as the header said (the default backoff is shorter)
    assert server.stats()["faults"] == {"rate_limited": 2}


def test_exhausted_retries_raise_a_typed_error_and_nothing_is_answered(tmp_path: Path, served) -> None:
    server = served(script({"rate_limited": 10, "retry_after_s": 0.01}))
    workdir = world("create-file", tmp_path)
    with ChatClient(endpoint(server, max_retries=2)) as client:
        with pytest.raises(ModelCallError, match="HTTP 429") as raised:
            ChatAgent().run(load_task(TASKS / "create-file").instruction, client, LocalShell(workdir))
    assert raised.value.status == 429
    assert client.answered == 0
    assert counts(server) == ({}, {"rate_limited": 3})
    assert not (workdir / "greeting.txt").exists()


def test_a_retry_after_beyond_two_minutes_is_not_waited_out(tmp_path: Path, served) -> None:
    """The client's own cap (120 s): it gives up at once rather than sleep for the server's asked time."""
    server = served(script({"rate_limited": 1, "retry_after_s": 121}))
    with ChatClient(endpoint(server, max_retries=3)) as client, pytest.raises(ModelCallError) as raised:
        client.complete([_user("greeting.txt")])
    assert raised.value.status == 429
    assert server.stats()["faults"] == {"rate_limited": 1}


def test_a_server_that_is_gone_is_a_connection_error(tmp_path: Path, served) -> None:
    server = served(script())
    url = server.base_url
    server.stop()
    with ChatClient(ChatEndpoint(base_url=url, model="policy", max_retries=1)) as client:
        with pytest.raises(ModelCallError, match="connection failed") as raised:
            client.complete([_user("greeting.txt")])
    assert raised.value.status is None and not raised.value.timed_out


def test_a_slow_answer_times_out_per_request(tmp_path: Path, served) -> None:
    server = served(script({"slow": 5, "slow_s": 3}))
    with ChatClient(endpoint(server, timeout_s=0.3, max_retries=1)) as client:
        with pytest.raises(ModelCallError, match="no answer within 0.3s") as raised:
            client.complete([_user("greeting.txt")])
    assert raised.value.timed_out
    assert client.answered == 0


LOOP = {"match": "LOOP", "turns": [_call("bash", command="echo again")]}
LATE = {"match": "LATE", "turns": [_call("bash", command="touch ran")]}
SLEEPY = {"match": "SLEEPY", "turns": [_call("bash", command="sleep 30; echo woke")]}
MALFORMED = {
    "match": "MALFORMED",
    "turns": [
        {"tool_calls": [{"name": "bash", "arguments": "{not json"}]},
        {"tool_calls": [{"name": "bash", "arguments": {"cmd": "ls"}}]},
        {"tool_calls": [{"name": "bash", "arguments": '{"command": 7}'}]},
        {"tool_calls": [{"name": "rm_rf", "arguments": {}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "missing.txt"}}]},
        {"content": "I give up."},
    ],
}


def test_the_loop_ends_at_max_turns(tmp_path: Path, served) -> None:
    server = served(script(extra=[LOOP]))
    with ChatClient(endpoint(server)) as client:
        transcript = ChatAgent(AgentLimits(max_turns=3)).run("LOOP forever", client, LocalShell(tmp_path))
    assert transcript.ended == "max_turns"
    assert transcript.policy_calls == client.answered == 3
    assert [m.content for m in transcript.messages if m.role == "tool"] == ["exit code 0\nagain\n"] * 3


def test_the_loop_ends_at_its_deadline_killing_the_command(tmp_path: Path, served) -> None:
    server = served(script(extra=[SLEEPY]))
    started = time.monotonic()
    with ChatClient(endpoint(server)) as client:
        transcript = ChatAgent(AgentLimits(timeout_s=1.0)).run("SLEEPY", client, LocalShell(tmp_path))
    assert time.monotonic() - started < 10
    assert transcript.ended == "timeout"
    assert transcript.policy_calls == 1
    assert transcript.messages[-1].content == "timed out (killed)\n"


def test_a_model_call_cut_short_by_the_deadline_ends_the_loop(tmp_path: Path, served) -> None:
    """The call's timeout is lowered to the time left; its timing out then is the loop's timeout, not a failure."""
    server = served(script({"slow": 1, "slow_s": 5}))
    with ChatClient(endpoint(server, max_retries=0)) as client:
        transcript = ChatAgent(AgentLimits(timeout_s=0.5)).run("greeting.txt", client, LocalShell(tmp_path))
    assert transcript.ended == "timeout"
    assert transcript.policy_calls == client.answered == 0
    assert [m.role for m in transcript.messages] == ["system", "user"]


def test_a_call_after_the_deadline_is_not_run(tmp_path: Path, served) -> None:
    """A clock that has passed the deadline by the time the answer is in: its tool calls are answered, not run."""
    server = served(script(extra=[LATE]))
    workdir = world("create-file", tmp_path)
    ticks = iter([0.0, 0.0, 100.0, 100.0])  # the deadline set; the call made; the answer in late; the check
    agent = ChatAgent(AgentLimits(timeout_s=10.0), clock=lambda: next(ticks))
    with ChatClient(endpoint(server)) as client:
        transcript = agent.run("LATE", client, LocalShell(workdir))
    assert transcript.ended == "timeout"
    assert transcript.messages[-1].content == NOT_RUN
    assert not (workdir / "ran").exists()


def test_malformed_tool_arguments_are_told_to_the_model(tmp_path: Path, served) -> None:
    server = served(script(extra=[MALFORMED]))
    with ChatClient(endpoint(server)) as client:
        transcript = ChatAgent().run("MALFORMED", client, LocalShell(tmp_path))
    assert transcript.ended == "no_tool_call"
    texts = [m.content or "" for m in transcript.messages if m.role == "tool"]
    assert texts[0].startswith("error: the arguments of bash are not valid JSON")
    assert texts[1].startswith("error: invalid arguments for bash:") and "command" in texts[1]
    assert texts[2].startswith("error: invalid arguments for bash: command:")
    assert texts[3] == "error: no tool named 'rm_rf' (the tools are bash, read_file and write_file)"
    assert texts[4].startswith("error: cannot read missing.txt\nexit code 1\n")
    assert transcript.messages[-1].content == "I give up."


def test_the_agents_version_follows_its_limits() -> None:
    assert ChatAgent().version == ChatAgent(AgentLimits()).version
    assert ChatAgent().version != ChatAgent(AgentLimits(max_turns=5)).version


def test_the_api_key_comes_from_the_named_variable_and_defaults_to_a_placeholder(monkeypatch, served) -> None:
    server = served(script())
    monkeypatch.delenv("RL_ASSETS_POLICY_API_KEY", raising=False)
    with ChatClient(endpoint(server)) as client:
        client.complete([_user("greeting.txt")])
    monkeypatch.setenv("RL_ASSETS_POLICY_API_KEY", "sk-test")
    with ChatClient(endpoint(server)) as client:
        client.complete([_user("greeting.txt")])
        assert "sk-test" not in repr(client.endpoint) + repr(client.endpoint.model_dump())
    assert server.stats()["bearers"] == ["no-key", "sk-test"]


def test_clients_share_the_processs_tls_settings_and_keep_their_own_connections(served, monkeypatch) -> None:
    """The TLS context is built once a process (it cost ~27 ms of CPU a trial); each client's pool is its own, so
    closing one client leaves another answering."""
    import httpx

    from rl_assets.workloads.harbor import client as client_module

    built: list[object] = []
    create = httpx.create_ssl_context

    def counted(*args: Any, **kwargs: Any) -> object:
        built.append(create(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(client_module, "_TLS", [])
    monkeypatch.setattr(httpx, "create_ssl_context", counted)
    server = served(script())
    first, second, third = (ChatClient(endpoint(server)) for _ in range(3))
    assert len(built) == 1
    first.close()
    with second, third:
        assert second.complete([_user("greeting.txt")]).message.tool_calls
        assert third.complete([_user("greeting.txt")]).message.tool_calls
    assert counts(server)[0] == {"policy": 2}
