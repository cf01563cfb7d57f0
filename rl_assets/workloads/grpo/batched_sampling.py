"""Sampling many completions at once, each exactly as it would be sampled alone.

A policy server on a CPU is bound by memory bandwidth: every decoded token reads all the weights. Decoding
several sequences in one forward pass reads them once for all, which is how a group's samples (the same
prompt, many seeds) are answered at a multiple of one stream's speed. The catch is determinism: a retried
trial must get the tokens it got the first time, whoever it shares a batch with. Two measured facts on
PyTorch's CPU kernels make that hold here:

- a matrix product's row depends on the batch's *width*, not on the other rows: at a fixed number of rows,
  a row's output is bit-identical whatever the others hold and wherever it sits (at one row the kernel is a
  matrix-vector product with other rounding). So every decode step runs :data:`WIDTH` rows, empty slots
  padded, whether one request is in flight or four;
- attention mixes a row with its own past only, so it is computed row by row over that row's own cache
  (:func:`_rows_attention`, registered as a transformers attention function), never over a padded batch
  whose padding would change the reduction's order.

The prompt is prefilled alone (its numerics depend on the prompt only); the weights of every linear layer
are laid out transposed-contiguous once (:func:`_lay_out`), the layout on which the CPU's small-batch
matrix product is near the cost of a single row. ``tests/test_generation.py`` holds the invariance.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

WIDTH = 4
"""Rows of every decode step: the most sequences decoded together, and (fixed) part of what a sample is."""
ATTENTION = "rl_assets_rows"
"""The name :func:`_rows_attention` is registered under with transformers."""


@dataclass(frozen=True)
class Generated:
    """One sampled completion: its token ids (the stop token included), their logprobs, why it ended."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    """``stop`` (the model ended its turn) or ``length`` (``max_tokens`` reached)."""


@dataclass(frozen=True)
class Request:
    """What to sample: ``max_tokens`` tokens at most after ``prompt_ids``, at ``temperature``, seeded ``seed``."""

    prompt_ids: tuple[int, ...]
    max_tokens: int
    temperature: float
    seed: int


@dataclass
class _Row:
    request: Request
    answer: Future[Generated]
    generator: Any
    cache: list[Any]
    """Per layer: the row's own (keys, values), or None before its first token."""
    logits: Any = None
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def _rows_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float,
    dropout: float = 0.0,
    rows: Sequence[_Row | None] = (),
    **kwargs: Any,
) -> tuple[Any, None]:
    """Eager attention, one row at a time over that row's own cache (which it extends by the new keys)."""
    import torch

    layer, length, groups = module.layer_idx, query.shape[2], module.num_key_value_groups
    out = torch.zeros_like(query)
    for i, row in enumerate(rows):
        if row is None:
            continue
        keys, values = key[i : i + 1], value[i : i + 1]
        past = row.cache[layer]
        if past is not None:
            keys, values = torch.cat([past[0], keys], dim=2), torch.cat([past[1], values], dim=2)
        row.cache[layer] = (keys, values)
        keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
        weights = torch.matmul(query[i : i + 1], keys.transpose(2, 3)) * scaling
        if length > 1:
            seen = torch.ones(length, keys.shape[2], dtype=torch.bool).tril(keys.shape[2] - length)
            weights = weights.masked_fill(~seen, float("-inf"))
        weights = torch.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
        out[i] = torch.matmul(weights, values)[0]
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _rows_attention)


def _lay_out(model: Any) -> None:
    """Store each linear weight transposed-contiguous (same values; the fast layout for a few rows)."""
    import torch

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.weight.stride()[0] != 1:
                module.weight.data = module.weight.data.t().contiguous().t()


@contextmanager
def _attention(model: Any) -> Any:
    """The model with :func:`_rows_attention` for the duration (its own attention outside: a full forward)."""
    before = model.config._attn_implementation
    model.config._attn_implementation = ATTENTION
    try:
        yield model
    finally:
        model.config._attn_implementation = before


class Slots:
    """Up to :data:`WIDTH` sequences decoded together, one token each per :meth:`advance` (one thread's)."""

    def __init__(self, model: Any, stop_ids: Collection[int]) -> None:
        _register()
        _lay_out(model)
        self.model = model
        self.stop_ids = frozenset(stop_ids)
        self.rows: list[_Row] = []

    def free(self) -> int:
        return WIDTH - len(self.rows)

    def admit(self, request: Request, answer: Future[Generated]) -> None:
        """Prefill ``request``'s prompt alone and give it a slot."""
        import torch

        row = _Row(
            request, answer, torch.Generator().manual_seed(request.seed), [None] * self.model.config.num_hidden_layers
        )
        prompt = torch.tensor([list(request.prompt_ids)])
        with torch.no_grad(), _attention(self.model):
            out = self.model(
                prompt, position_ids=torch.arange(prompt.shape[1])[None], use_cache=False, rows=[row], logits_to_keep=1
            )
        row.logits = out.logits[0, -1]
        self.rows.append(row)

    def advance(self) -> None:
        """Draw each row's next token; answer the rows that ended; run one :data:`WIDTH`-row step for the rest."""
        import torch

        going = []
        for row in self.rows:
            dist = torch.log_softmax(row.logits.float() / row.request.temperature, dim=-1)
            token = int(torch.multinomial(dist.exp(), 1, generator=row.generator))
            row.ids.append(token)
            row.logprobs.append(float(dist[token]))
            if token in self.stop_ids or len(row.ids) >= row.request.max_tokens:
                reason = "stop" if token in self.stop_ids else "length"
                row.answer.set_result(Generated(tuple(row.ids), tuple(row.logprobs), reason))
            else:
                going.append(row)
        self.rows = going
        if not going:
            return
        slots: list[_Row | None] = [*going, *[None] * (WIDTH - len(going))]
        ids = torch.tensor([[r.ids[-1] if r else 0] for r in slots])
        positions = torch.tensor([[len(r.request.prompt_ids) + len(r.ids) - 1 if r else 0] for r in slots])
        with torch.no_grad(), _attention(self.model):
            out = self.model(ids, position_ids=positions, use_cache=False, rows=slots, logits_to_keep=1)
        for i, row in enumerate(going):
            row.logits = out.logits[i, -1]

    def fail(self, error: BaseException) -> None:
        """Answer every row in flight with ``error`` and free the slots."""
        for row in self.rows:
            row.answer.set_exception(error)
        self.rows = []


def sample(
    model: Any, prompt_ids: Sequence[int], stop_ids: Collection[int], max_tokens: int, temperature: float, seed: int
) -> Generated:
    """One completion, in the caller's thread: the tokens :class:`Sampler` gives the same request.

    Each logprob is the token's under the distribution it was drawn from (the logits over ``temperature``);
    at temperature 1, the one the trainer's importance ratio compares against.
    """
    return sample_together(model, stop_ids, [Request(tuple(prompt_ids), max_tokens, temperature, seed)])[0]


def sample_together(model: Any, stop_ids: Collection[int], requests: Sequence[Request]) -> list[Generated]:
    """``requests`` answered :data:`WIDTH` at a time in the caller's thread, each as if alone."""
    slots = Slots(model, stop_ids)
    answers: list[Future[Generated]] = [Future() for _ in requests]
    waiting = list(zip(requests, answers, strict=True))
    while waiting or slots.rows:
        while waiting and slots.free():
            slots.admit(*waiting.pop(0))
        slots.advance()
    return [a.result() for a in answers]


class Sampler:
    """A thread answering requests from many callers through one :class:`Slots`: a request joins as soon as a
    slot frees, so concurrent requests (a group's samples) share each forward pass."""

    def __init__(self, model: Any, stop_ids: Collection[int]) -> None:
        self._slots = Slots(model, stop_ids)
        self._queue: list[tuple[Request, Future[Generated]]] = []
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def submit(self, request: Request) -> Future[Generated]:
        answer: Future[Generated] = Future()
        with self._wake:
            if self._closing:
                raise RuntimeError("the sampler is closed")
            self._queue.append((request, answer))
            self._wake.notify()
        return answer

    def close(self) -> None:
        """Answer what was submitted, then stop the thread."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()

    def _run(self) -> None:
        slots = self._slots
        while True:
            with self._wake:
                while not self._queue and not slots.rows and not self._closing:
                    self._wake.wait()
                if not self._queue and not slots.rows:
                    return
                joining = self._queue[: slots.free()]
                del self._queue[: len(joining)]
            for request, answer in joining:
                try:
                    slots.admit(request, answer)
                except Exception as error:  # that request's answer is the error; the others go on
                    answer.set_exception(error)
            try:
                slots.advance()
            except Exception as error:  # a failed step answers its rows with the error; the thread lives on
                slots.fail(error)
