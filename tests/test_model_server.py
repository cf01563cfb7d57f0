"""The stand-in model server, seen on the wire: answers chosen by content, faults by request, honest counts."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from rl_assets_testkit.served_model import ServedModel

SCRIPT = {
    "policy_model": "policy",
    "judge_model": "judge",
    "tasks": [
        {
            "match": "TASK-A",
            "turns": [
                {"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
                {"content": "all done"},
            ],
        }
    ],
    "judge": [{"match": "grade it", "answer": '{"score": 0.5}'}],
}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    servers: list[ServedModel] = []

    def started(script: dict[str, Any]) -> ServedModel:
        directory = tmp_path / f"server-{len(servers)}"
        directory.mkdir()
        servers.append(ServedModel(script, directory))
        return servers[-1].__enter__()

    yield started
    for server in servers:
        server.stop()


def post(server: ServedModel, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), json.loads(answer.read())
    finally:
        connection.close()


FIRST = {"model": "policy", "messages": [{"role": "user", "content": "TASK-A please"}]}
SECOND = {
    "model": "policy",
    "messages": [
        {"role": "user", "content": "TASK-A please"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call-0-0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call-0-0", "content": "exit code 0"},
    ],
}


def test_models_are_listed_and_the_port_is_loopback_only(start) -> None:
    server = start(SCRIPT)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", "/v1/models")
    models = json.loads(connection.getresponse().read())
    connection.close()
    assert [m["id"] for m in models["data"]] == ["policy", "judge"]
    listening = [c.laddr for c in psutil.Process(server.pid).net_connections("inet") if c.status == "LISTEN"]
    assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", server.port)]


def test_the_answer_is_chosen_by_content_not_by_arrival_order(start) -> None:
    server = start(SCRIPT)
    second_first = post(server, SECOND)
    first = post(server, FIRST)
    assert second_first[2]["choices"][0]["message"]["content"] == "all done"
    assert first[2]["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "bash",
        "arguments": '{"command": "ls"}',
    }
    assert first[2]["choices"][0]["finish_reason"] == "tool_calls"
    assert post(server, FIRST)[2] == first[2]  # asked again, answered alike
    assert server.stats()["answered"] == {"policy": 3}


def test_token_ids_and_logprobs_come_only_when_asked_and_match_usage(start) -> None:
    server = start(SCRIPT)
    _, _, plain = post(server, FIRST)
    assert "prompt_token_ids" not in plain and plain["choices"][0]["logprobs"] is None
    _, _, rich = post(server, {**FIRST, "logprobs": True, "return_token_ids": True})
    choice, usage = rich["choices"][0], rich["usage"]
    assert len(rich["prompt_token_ids"]) == usage["prompt_tokens"]
    assert len(choice["token_ids"]) == len(choice["logprobs"]["content"]) == usage["completion_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_the_judge_model_gets_the_judges_answer(start) -> None:
    server = start(SCRIPT)
    _, _, answer = post(server, {"model": "judge", "messages": [{"role": "user", "content": "please grade it"}]})
    assert answer["choices"][0]["message"]["content"] == '{"score": 0.5}'
    assert server.stats()["answered"] == {"judge": 1}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": "nope", "messages": [{"role": "user", "content": "TASK-A"}]}, 404),
        ({"model": "policy", "messages": [{"role": "user", "content": "unscripted"}]}, 400),
        ({"model": "policy", "messages": SECOND["messages"][:2] + [{"role": "assistant", "content": "x"}]}, 400),
    ],
)
def test_refusals_are_openai_shaped_errors_and_not_answers(start, body: dict[str, Any], status: int) -> None:
    server = start(SCRIPT)
    got, _, error = post(server, body)
    assert got == status and error["error"]["message"]
    assert server.stats()["answered"] == {}


def test_faults_are_per_request_in_order_then_the_answer(start) -> None:
    server = start({**SCRIPT, "faults": {"server_errors": 1, "rate_limited": 2, "retry_after_s": 0.25}})
    statuses = [post(server, FIRST)[:2] for _ in range(3)]
    assert [s for s, _ in statuses] == [500, 429, 429]
    assert statuses[1][1]["Retry-After"] == "0.25"
    assert post(server, SECOND)[0] == 500  # another request: its own count
    assert post(server, FIRST)[0] == 200
    assert server.stats() == {
        "answered": {"policy": 1},
        "faults": {"server_errors": 2, "rate_limited": 2},
        "bearers": [""],
        "fields": {"model": 1, "messages": 1},  # a request's fields are counted once it is read: faulted ones are not
    }


def test_a_dropped_request_gets_no_answer_at_all(start) -> None:
    server = start({**SCRIPT, "faults": {"dropped": 1}})
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        post(server, FIRST)
    assert post(server, FIRST)[0] == 200
    assert server.stats()["faults"] == {"dropped": 1}


def test_stopping_leaves_no_process(tmp_path: Path) -> None:
    with ServedModel(SCRIPT, tmp_path) as server:
        pid = server.pid
        assert pid is not None and psutil.pid_exists(pid)
    assert server.pid is None and not psutil.pid_exists(pid)
