"""A stand-in for vLLM or a hosted API: an OpenAI-compatible HTTP server with scripted answers and faults.

Run as ``python -m rl_assets_testkit.model_server --port 0 --script FILE``; it binds 127.0.0.1 only
and prints its bound port on the first line of stdout. It serves:

- ``GET /v1/models``: the script's policy and judge models;
- ``POST /v1/chat/completions``: non-streaming, with tool calls, ``usage``, and, when asked for,
  ``logprobs`` (``choices[0].logprobs.content``) and vLLM's token ids (``return_token_ids``:
  ``prompt_token_ids`` on the response, ``token_ids`` on the choice);
- ``GET /stats``: ``{"answered": {model: n}, "faults": {kind: n}, "bearers": [...], "fields": {name: n}}``:
  answered counts prompt 200s only; ``bearers`` are the distinct API keys sent (test keys only: this is a
  test server); ``fields`` counts the top-level fields of the chat requests received (``tool_choice``...).

It is written from the API's shape alone and imports nothing of ``rl_assets`` (an import contract
keeps it so), so a client bug cannot hide behind shared code. The script (JSON)::

    {"policy_model": "policy", "judge_model": "judge",
     "tasks": [{"match": "greeting.txt",            # a substring of the first user message
                "turns": [{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
                          {"content": "Done."}]}],
     "judge": [{"match": "greeting.txt", "answer": "{\\"score\\": 1}",   # match: a substring of the prompt
                "structured": "{\\"reason\\": \\"ok\\", \\"score\\": 1}"}],   # optional: when a schema is asked
     "answer_delay_s": 0.0,                         # every answer waits this long (a model's time)
     "strict": {"refused_fields": ["response_format"],   # a request with one: 400, as a server without it
                "response_formats": ["text", "json_object"],  # any other type: 500, as llama-cpp-python
                "null_content": true,               # an assistant message with content null: 500, as llama-cpp-python
                "tools_need_choice": true},         # tools without tool_choice are ignored, as llama-cpp-python
     "faults": {"rate_limited": 2, "retry_after_s": 0.05, "server_errors": 1, "dropped": 1,
                "slow": 1, "slow_s": 2.0}}

Answers are chosen by content, never by arrival order: a policy request gets turn *k* of the first
task whose ``match`` is in its first user message, *k* being the number of assistant messages it
already holds (past the last turn, the last turn again; ``arguments`` given as a string are sent
verbatim, malformed or not). A request for ``judge_model`` gets the first ``judge`` entry matching its
user messages; its ``structured`` answer instead, if it has one, when the request carries a JSON schema
``response_format`` (as a server that constrains its output to the schema answers). So a retried or re-run
request gets the same answer whichever process sends it.

``strict`` makes the server as picky as the real ones rl-assets meets: it refuses fields it does not
support (a 400) and ``response_format`` types it does not know (a 500 naming it), refuses ``content:
null``, and answers a request whose tools name no ``tool_choice`` as if no tools were given (a policy
turn's tool calls dropped, its text kept).

Faults are keyed by a hash of the request body: the first ``server_errors`` attempts of each distinct
request get a 500, the next ``rate_limited`` a 429 with ``Retry-After``, the next ``dropped`` have
their connection closed unanswered, the next ``slow`` are answered after ``slow_s`` seconds (counted
as faults, not as answered: their client may have given up), and every later attempt is answered.

Token ids come from a toy tokenizer (words and punctuation, each hashed to an id) over a toy chat
template, and each token's logprob from its id: made up, but deterministic and of vLLM's shape.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VOCAB = 50_000
FAULT_ORDER = ("server_errors", "rate_limited", "dropped", "slow")
"""The order of a request's faulted attempts. A 500 goes first because the client's backoff without a
``Retry-After`` doubles with each retry already taken; the 429s after it wait what their header says."""
_TOKEN = re.compile(r"\w+|[^\w\s]")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _token_id(token: str) -> int:
    return zlib.crc32(token.encode("utf-8")) % VOCAB


def _logprob(token_id: int) -> float:
    return -((token_id % 97) + 1) / 100


def _prompt_text(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """A toy chat template: what the ids and the usage of a prompt are counted from."""
    parts = [f"<|tools|> {json.dumps(tools, sort_keys=True)}"] if tools else []
    for m in messages:
        parts.append(f"<|{m.get('role')}|> {m.get('content') or ''}")
        for call in m.get("tool_calls") or []:
            parts.append(f"<|call|> {call['function']['name']} {call['function']['arguments']}")
    parts.append("<|assistant|>")
    return "\n".join(parts)


def _error(status: int, message: str, kind: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    return status, {"error": {"message": message, "type": kind, "code": status}}, {}


class Server:
    """The script, the fault counters and the stats, shared by the handler threads."""

    def __init__(self, script: dict[str, Any]) -> None:
        self.script = script
        self.policy_model: str = script.get("policy_model", "policy")
        self.judge_model: str = script.get("judge_model", "judge")
        self.faults: dict[str, Any] = script.get("faults", {})
        self.answer_delay_s = float(script.get("answer_delay_s", 0.0))
        """Every answer waits this long first: a model's generation time, for latency-bound benchmarks."""
        self.strict: dict[str, Any] = script.get("strict", {})
        self.fields: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.attempts: Counter[str] = Counter()
        self.answered: Counter[str] = Counter()
        self.faulted: Counter[str] = Counter()
        self.bearers: set[str] = set()

    def fault(self, body: bytes) -> str | None:
        """The fault this attempt of ``body`` gets, if any (and counts it)."""
        key = hashlib.sha256(body).hexdigest()
        with self.lock:
            attempt = self.attempts[key]
            self.attempts[key] += 1
            bound = 0
            for kind in FAULT_ORDER:
                bound += int(self.faults.get(kind, 0))
                if attempt < bound:
                    self.faulted[kind] += 1
                    return kind
        return None

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "answered": dict(self.answered),
                "faults": dict(self.faulted),
                "bearers": sorted(self.bearers),
                "fields": dict(self.fields),
            }

    def complete(self, request: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        """``(status, body, headers)`` of a chat completion request."""
        model = request.get("model")
        messages = request.get("messages")
        if model not in (self.policy_model, self.judge_model):
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list", "BadRequestError")
        with self.lock:
            self.fields.update(request.keys())
        refused = [f for f in self.strict.get("refused_fields", []) if f in request]
        if refused:
            return _error(400, f"unsupported field(s): {', '.join(refused)}", "BadRequestError")
        formats, wanted = self.strict.get("response_formats"), request.get("response_format")
        if formats is not None and isinstance(wanted, dict) and wanted.get("type") not in formats:
            expected = " or ".join(repr(f) for f in formats)
            return _error(500, f"1 validation error: body.response_format.type: Input should be {expected}", "Error")
        nulls = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("content") is None]
        if nulls and self.strict.get("null_content"):
            details = "; ".join(f"messages.{i}.content: Input should be a valid string" for i in nulls)
            return _error(500, f"{len(nulls)} validation errors: {details}", "InternalServerError")
        unanswered = _unanswered_tool_calls(messages)
        if unanswered:
            return _error(400, f"tool calls without a tool message: {unanswered}", "BadRequestError")
        if model == self.judge_model:
            turn = self._judge_turn(messages, _wants_schema(request))
        else:
            turn = self._policy_turn(messages)
            if turn is not None and self.strict.get("tools_need_choice") and "tool_choice" not in request:
                turn = {"content": turn.get("content") or "I would use a tool, but none was offered."}
        if turn is None:
            return _error(400, "the script has no answer for this request", "BadRequestError")
        return 200, self._answer(request, turn, len([m for m in messages if m.get("role") == "assistant"])), {}

    def _policy_turn(self, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        first_user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        for task in self.script.get("tasks", []):
            if task["match"] in first_user:
                turns = task["turns"]
                done = sum(1 for m in messages if m.get("role") == "assistant")
                return turns[min(done, len(turns) - 1)]
        return None

    def _judge_turn(self, messages: list[dict[str, Any]], schema: bool) -> dict[str, Any] | None:
        prompt = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "user")
        for entry in self.script.get("judge", []):
            if entry["match"] in prompt:
                return {"content": entry.get("structured", entry["answer"]) if schema else entry["answer"]}
        return None

    def _answer(self, request: dict[str, Any], turn: dict[str, Any], index: int) -> dict[str, Any]:
        calls = [
            {
                "id": f"call-{index}-{i}",
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]),
                },
            }
            for i, c in enumerate(turn.get("tool_calls", []))
        ]
        content = turn.get("content")
        said = [f"{c['function']['name']} {c['function']['arguments']}" for c in calls]
        completion = " ".join([content or "", *said])
        prompt_ids = [_token_id(t) for t in _tokens(_prompt_text(request["messages"], request.get("tools") or []))]
        tokens = _tokens(completion)
        ids = [_token_id(t) for t in tokens]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": content, "tool_calls": calls or None},
            "finish_reason": turn.get("finish_reason", "tool_calls" if calls else "stop"),
            "logprobs": None,
        }
        if request.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {"token": t, "logprob": _logprob(i), "bytes": list(t.encode("utf-8")), "top_logprobs": []}
                    for t, i in zip(tokens, ids, strict=True)
                ]
            }
        answer: dict[str, Any] = {
            "id": f"chatcmpl-{hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:24]}",
            "object": "chat.completion",
            "created": 0,
            "model": request["model"],
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt_ids) + len(ids),
            },
        }
        if request.get("return_token_ids"):
            answer["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = ids
        return answer

    def count_answer(self, model: str) -> None:
        with self.lock:
            self.answered[model] += 1


def _wants_schema(request: dict[str, Any]) -> bool:
    """Whether the request asks for output following a JSON schema: OpenAI's ``response_format``, or
    llama-cpp-python's (``json_object`` with a ``schema``)."""
    wanted = request.get("response_format")
    if not isinstance(wanted, dict):
        return False
    return wanted.get("type") == "json_schema" or (wanted.get("type") == "json_object" and "schema" in wanted)


def _unanswered_tool_calls(messages: list[dict[str, Any]]) -> list[str]:
    """Ids of tool calls no tool message answers before the next assistant message (a real server's 400)."""
    open_ids: list[str] = []
    for m in messages:
        if m.get("role") == "assistant":
            if open_ids:
                return open_ids
            open_ids = [c["id"] for c in m.get("tool_calls") or []]
        elif m.get("role") == "tool" and m.get("tool_call_id") in open_ids:
            open_ids.remove(m["tool_call_id"])
    return open_ids


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ModelHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test's output is its assertions."""

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        state = self.server.state
        if self.path == "/v1/models":
            served = (state.policy_model, state.judge_model)
            models = [{"id": m, "object": "model", "owned_by": "stand-in"} for m in served]
            self._send(200, {"object": "list", "data": models})
        elif self.path == "/stats":
            self._send(200, state.stats())
        else:
            self._send(*_error(404, f"no route {self.path}", "NotFoundError"))

    def do_POST(self) -> None:
        state = self.server.state
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/chat/completions":
            self._send(*_error(404, f"no route {self.path}", "NotFoundError"))
            return
        authorization = self.headers.get("Authorization", "")
        with state.lock:
            state.bearers.add(authorization.removeprefix("Bearer "))
        fault = state.fault(body)
        if fault == "rate_limited":
            retry_after = {"Retry-After": str(state.faults.get("retry_after_s", 1))}
            self._send(429, {"error": {"message": "rate limited", "type": "rate_limit_error"}}, retry_after)
            return
        if fault == "server_errors":
            self._send(*_error(500, "internal error (injected)", "InternalServerError"))
            return
        if fault == "dropped":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "slow":
            time.sleep(float(state.faults.get("slow_s", 1.0)))  # the injected latency itself
        try:
            request = json.loads(body)
        except json.JSONDecodeError:
            self._send(*_error(400, "the body is not JSON", "BadRequestError"))
            return
        if state.answer_delay_s:
            time.sleep(state.answer_delay_s)  # the model's generation time itself
        status, answer, headers = state.complete(request)
        if status == 200 and fault is None:  # a slow answer is counted as a fault: its client may be gone
            state.count_answer(request["model"])
        try:
            self._send(status, answer, headers)
        except OSError:
            self.close_connection = True  # the client gave up (a slow answer after its timeout)


class ModelHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    """Hundreds of trials connect at once in a latency benchmark; a short backlog would drop their connects."""

    def __init__(self, port: int, state: Server) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.state = state

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client hanging up mid-answer is normal for a server under fault injection; not worth a traceback."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", required=True, help="The script's JSON file.")
    args = parser.parse_args()
    with open(args.script, encoding="utf-8") as f:
        server = ModelHTTPServer(args.port, Server(json.load(f)))
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
