"""One chat completion against any OpenAI-compatible server (vLLM, SGLang, llama.cpp, a hosted API).

The official ``openai`` client does the transport and the retries. What it does, verified against
the pinned version (3.60.0, ``openai/_base_client.py``): a request is retried up to ``max_retries``
times on connection errors, timeouts and on status 408, 409, 429 and 5xx. Before a retry it waits
what the answer's ``retry-after-ms`` or ``Retry-After`` header says (seconds, fractions allowed, or
an HTTP date) when that is more than 0 and at most 120 s; without one it backs off exponentially,
0.5 s doubling to at most 8 s, minus up to 25 % jitter. A ``Retry-After`` beyond 120 s is not waited
out: the client gives up at once. ``timeout_s`` bounds each attempt, not the sum of them.

What this module adds: the answer read into the transcript's records (including vLLM's token ids,
which are extra fields outside the OpenAI schema), a count of answered requests, and one typed
error, :class:`ModelCallError`, for a call that failed for good, so the trial fails as a failed trial.

The request goes through the client's ``post`` (its documented way to any endpoint, with the client's retries,
timeouts and key), not ``chat.completions.create``: ``create`` walks every message of the conversation against
the API's typed dicts on each call (``maybe_transform``, hundreds of Python calls a message), a conversion that
changes nothing in a body that is already plain JSON, and whose cost grows with the square of a trial's turns.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rl_assets.domain.transcripts import Message, ModelTurn, ToolCall, Usage

POLICY_KEY_ENV = "RL_ASSETS_POLICY_API_KEY"
JUDGE_KEY_ENV = "RL_ASSETS_JUDGE_API_KEY"
PLACEHOLDER_KEY = "no-key"
"""Sent when the key's variable is unset: the client requires some key, and local servers ignore it."""


class ChatEndpoint(BaseModel):
    """Where a model is served and how to ask it. Holds the *name* of the key's variable, never the key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(pattern=r"^https?://.+/v1/?$", description="The server's API root, ending in /v1.")
    model: str = Field(min_length=1, description="The served model name.")
    api_key_env: str = POLICY_KEY_ENV
    timeout_s: float = Field(default=120.0, gt=0, description="Per attempt.")
    max_retries: int = Field(default=4, ge=0)
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    tool_choice: Literal["auto", "required", "none"] = "auto"
    """Sent with every request that offers tools. OpenAI's default when tools are given, but not every server's:
    llama-cpp-python ignores the tools of a request that does not name a choice."""
    logprobs: bool = True
    """Ask for the sampled tokens' logprobs (reasoning models on hosted APIs refuse this: turn it off)."""
    return_token_ids: bool = True
    """Ask for vLLM's prompt and completion token ids. vLLM ignores fields it does not know, with a
    warning; hosted APIs may refuse them with a 400, so turn this off for them."""
    policy: dict[str, Any] | None = None
    """The home's policy server only: the policy version asked for (``{"experiment": ..., "version": N}``)."""


class ModelCallError(RuntimeError):
    """A model call that failed for good: retries exhausted, a refusal (4xx), or an unusable answer."""

    def __init__(self, message: str, status: int | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.timed_out = timed_out


class Answer(BaseModel):
    """One answered call: the assistant message and the call's turn record (``message_index`` left 0)."""

    model_config = ConfigDict(frozen=True)

    message: Message
    turn: ModelTurn


class ChatClient:
    """Chat completions from one endpoint, counting the requests that were answered."""

    def __init__(
        self, endpoint: ChatEndpoint, on_answer: Callable[[Answer], None] | None = None, api_key: str | None = None
    ) -> None:
        """``on_answer`` sees every answered call as it arrives (the cost ledger records it there and then);
        ``api_key`` replaces the endpoint's variable (the home's own policy server: a key file of the home)."""
        self.endpoint = endpoint
        self._on_answer = on_answer
        import openai  # here, not at module import: every process that loads the definitions would pay ~0.4 s

        self._client = openai.OpenAI(
            base_url=endpoint.base_url,
            api_key=api_key or os.environ.get(endpoint.api_key_env) or PLACEHOLDER_KEY,
            timeout=endpoint.timeout_s,
            max_retries=endpoint.max_retries,
            http_client=openai.DefaultHttpxClient(verify=_tls_context()),
        )
        self._answered = 0
        self._lock = threading.Lock()

    @property
    def answered(self) -> int:
        """Requests the server answered (a call retried three times and then answered counts once)."""
        with self._lock:
            return self._answered

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] = (),
        timeout_s: float | None = None,
        seed: int | None = None,
        response_format: dict[str, Any] | None = None,
        retries: int | None = None,
    ) -> Answer:
        """The model's next message after ``messages``; ``timeout_s`` lowers the per-attempt timeout;
        ``seed`` asks for reproducible sampling (OpenAI's and vLLM's ``seed``); ``response_format`` is
        OpenAI's (a JSON schema the answer must follow, on servers that constrain their output); ``retries``
        replaces the endpoint's ``max_retries`` for this call."""
        e = self.endpoint
        params: dict[str, Any] = {"model": e.model, "messages": [_wire(m) for m in messages]}
        if tools:
            params["tools"] = list(tools)
            params["tool_choice"] = e.tool_choice
        if response_format is not None:
            params["response_format"] = response_format
        if e.temperature is not None:
            params["temperature"] = e.temperature
        if e.top_p is not None:
            params["top_p"] = e.top_p
        if e.max_tokens is not None:
            params["max_tokens"] = e.max_tokens
        if e.logprobs:
            params["logprobs"] = True
        if seed is not None:
            params["seed"] = seed
        if e.return_token_ids:
            params["return_token_ids"] = True
        if e.policy is not None:
            params["policy"] = e.policy
        timeout = e.timeout_s if timeout_s is None else min(e.timeout_s, timeout_s)
        where = f"model {e.model!r} at {e.base_url}"
        import openai
        from openai.types.chat import ChatCompletion

        # The key as ``create`` sends it: the client's key as a bearer token, and no other credential.
        options: dict[str, Any] = {"timeout": timeout, "security": {"bearer_auth": True}}
        if retries is not None:
            options["max_retries"] = retries
        try:
            completion = self._client.post("/chat/completions", cast_to=ChatCompletion, body=params, options=options)
        except openai.APITimeoutError:
            raise ModelCallError(f"{where}: no answer within {timeout:g}s", timed_out=True) from None
        except openai.APIConnectionError as err:
            raise ModelCallError(f"{where}: connection failed ({err.__cause__ or err})") from None
        except openai.APIStatusError as err:
            raise ModelCallError(f"{where}: HTTP {err.status_code}: {_short(err.message)}", err.status_code) from None
        with self._lock:
            self._answered += 1
        answer = _read(completion, where)
        if self._on_answer is not None:
            self._on_answer(answer)
        return answer

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_TLS: list[ssl.SSLContext] = []
_TLS_LOCK = threading.Lock()


def _tls_context() -> ssl.SSLContext:
    """The process's TLS settings for every client, built once as httpx would build each client's (certifi's
    bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``): building them is about 27 ms of CPU, which a rollout
    worker paid for every trial it started, hundreds at once. Each client keeps its own connection pool."""
    with _TLS_LOCK:
        if not _TLS:
            import httpx

            _TLS.append(httpx.create_ssl_context())
        return _TLS[0]


def preload() -> None:
    """Import what a process's first client imports lazily (httpx's transport, with its anyio, trio and h11), and
    build the TLS context: the run workers' forkserver calls this once, so no run's trial threads do (0.8 s of CPU
    a run, on the path of its first model calls)."""
    ChatClient(ChatEndpoint(base_url="http://127.0.0.1/v1", model="preload"))


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _wire(message: Message) -> dict[str, Any]:
    """A message as the Chat Completions API takes it.

    An assistant message that only calls tools has no text: it is sent as ``""``, not ``null``. OpenAI
    takes either, but llama-cpp-python's server (and others validating with a strict schema) refuses
    ``null`` with a 500, which would fail every trial at its second model call.
    """
    wire: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _ids(value: object) -> tuple[int, ...] | None:
    """Token ids from an extra field, or None when the server sent none (or something else)."""
    if isinstance(value, list) and set(map(type, value)) <= {int}:  # not bool; at C speed: hundreds of ids a call
        return tuple(value)
    return None


def _read(completion: Any, where: str) -> Answer:
    """The records of one answer; an answer without a choice is unusable, not an empty turn."""
    if not completion.choices:
        raise ModelCallError(f"{where}: the answer has no choices")
    choice = completion.choices[0]
    calls = tuple(
        ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
        for c in choice.message.tool_calls or ()
        if c.type == "function"
    )
    message = Message(role="assistant", content=choice.message.content, tool_calls=calls)
    usage = completion.usage
    logprobs = choice.logprobs.content if choice.logprobs is not None else None
    turn = ModelTurn(
        message_index=0,
        finish_reason=str(choice.finish_reason),
        usage=Usage(
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
        ),
        # vLLM puts the prompt's ids on the response; some servers put them on the choice.
        prompt_token_ids=_ids(getattr(completion, "prompt_token_ids", None))
        or _ids(getattr(choice, "prompt_token_ids", None)),
        token_ids=_ids(getattr(choice, "token_ids", None)),
        logprobs=None if logprobs is None else tuple(t.logprob for t in logprobs),
        policy_version=_served_version(getattr(completion, "policy", None)),
    )
    return Answer(message=message, turn=turn)


def _served_version(value: object) -> int | None:
    """The version the home's policy server says answered (its extra ``policy`` field), else None."""
    version = value.get("version") if isinstance(value, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None
