"""The GRPO update in torch: response-token logprobs, the clipped policy-gradient loss, micro-batched.

Per response token ``t`` of a sample with advantage ``A``:

- with rollout logprobs (``old``): ``ratio = exp(logp - old)`` and the loss is
  ``-min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A)`` (PPO's clipped surrogate, as GRPO uses it);
- without (REINFORCE): ``-A * logp``, whose gradient is the ratio form's at ``ratio = 1``;
- with ``kl_coef``: plus ``kl_coef * (exp(ref - logp) - (ref - logp) - 1)``, the k3 estimate of the KL to
  the base model (``ref``: its logprob of the token).

The loss is the sum over every response token of the step divided by their number (a token mean over the
whole batch), so accumulating micro-batches gives the gradient of the whole batch. Prompt tokens (the
instruction, earlier turns, tool output) have no loss: the mask covers response tokens only. One
optimiser step per training step, after clipping the gradient norm to :data:`MAX_GRAD_NORM`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rl_assets.workloads.grpo.samples import Sample

MAX_GRAD_NORM = 1.0


@dataclass(frozen=True)
class LossParts:
    """A micro-batch's summed loss (a tensor, for backward) and its counts."""

    loss_sum: Any
    tokens: int
    clipped: int
    kl_sum: float


def padded(samples: Sequence[Sample], pad_id: int) -> tuple[Any, Any, Any]:
    """``(input_ids, attention_mask, loss_mask)``: right-padded; ``loss_mask[b, i]`` marks position ``i``
    predicting a response token (``i + 1``), so it lines up with ``logits[:, :-1]``."""
    import torch

    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    loss_mask = torch.zeros((len(samples), width - 1), dtype=torch.float32)
    for b, s in enumerate(samples):
        seq = [*s.prompt_ids, *s.response_ids]
        ids[b, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[b, : len(seq)] = 1
        loss_mask[b, len(s.prompt_ids) - 1 : len(seq) - 1] = 1.0
    return ids, attention, loss_mask


def token_logprobs(model: Any, ids: Any, attention: Any) -> Any:
    """``logp[b, i]``: the model's log-probability of token ``i + 1`` given tokens ``0..i``."""
    import torch

    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def _rollout_logprobs(samples: Sequence[Sample], shape: Any) -> tuple[Any, Any]:
    """``(old, has_old)``: the rollout logprobs placed at the response positions, and which samples have them."""
    import torch

    old = torch.zeros(shape, dtype=torch.float32)
    has = torch.zeros((shape[0], 1), dtype=torch.float32)
    for b, s in enumerate(samples):
        if s.old_logprobs is not None:
            start = len(s.prompt_ids) - 1
            old[b, start : start + len(s.old_logprobs)] = torch.tensor(s.old_logprobs, dtype=torch.float32)
            has[b, 0] = 1.0
    return old, has


def micro_batch_loss(
    model: Any, samples: Sequence[Sample], pad_id: int, clip: float, kl_coef: float | None, reference: Any
) -> LossParts:
    """The summed per-token loss of ``samples`` (see the module's docstring), with its counts."""
    import torch

    ids, attention, mask = padded(samples, pad_id)
    logp = token_logprobs(model, ids, attention)
    advantage = torch.tensor([[s.advantage] for s in samples], dtype=torch.float32)
    old, has_old = _rollout_logprobs(samples, logp.shape)
    ratio = torch.exp(logp - torch.where(has_old.bool(), old, logp.detach()))
    clipped_ratio = torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    surrogate = -torch.minimum(ratio * advantage, clipped_ratio * advantage)
    per_token = has_old * surrogate + (1.0 - has_old) * (-advantage * logp)
    kl_sum = 0.0
    if kl_coef is not None:
        with torch.no_grad():
            ref = token_logprobs(reference, ids, attention)
        diff = ref - logp
        kl = torch.exp(diff) - diff - 1.0
        per_token = per_token + kl_coef * kl
        kl_sum = float((kl.detach() * mask).sum())
    outside = ((ratio.detach() - clipped_ratio.detach()).abs() > 0).float() * has_old * mask
    return LossParts(
        loss_sum=(per_token * mask).sum(), tokens=int(mask.sum()), clipped=int(outside.sum()), kl_sum=kl_sum
    )


@dataclass(frozen=True)
class StepResult:
    """What the step measured (before its update)."""

    loss: float
    tokens: int
    clipped_fraction: float
    kl: float | None


def grpo_step(
    model: Any,
    optimizer: Any,
    samples: Sequence[Sample],
    pad_id: int,
    lr: float,
    clip: float,
    micro_batch: int,
    kl_coef: float | None = None,
    reference: Any = None,
) -> StepResult:
    """One optimiser step on ``samples`` (in their order, ``micro_batch`` at a time); no step without tokens."""
    import torch

    total = sum(len(s.response_ids) for s in samples)
    if total == 0:
        return StepResult(loss=0.0, tokens=0, clipped_fraction=0.0, kl=None if kl_coef is None else 0.0)
    model.train()
    optimizer.zero_grad(set_to_none=False)
    loss = 0.0
    clipped = 0
    kl_sum = 0.0
    for start in range(0, len(samples), micro_batch):
        parts = micro_batch_loss(model, samples[start : start + micro_batch], pad_id, clip, kl_coef, reference)
        (parts.loss_sum / total).backward()
        loss += float(parts.loss_sum.detach()) / total
        clipped += parts.clipped
        kl_sum += parts.kl_sum
    if not math.isfinite(loss):
        raise FloatingPointError(f"the GRPO loss is not finite ({loss})")
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return StepResult(
        loss=loss, tokens=total, clipped_fraction=clipped / total, kl=None if kl_coef is None else kl_sum / total
    )


def batch_loss(model: Any, samples: Sequence[Sample], pad_id: int, clip: float, micro_batch: int) -> float:
    """The token-mean loss of ``samples`` under ``model``, without a gradient (what a step lowers)."""
    import torch

    total = sum(len(s.response_ids) for s in samples)
    with torch.no_grad():
        parts = [
            micro_batch_loss(model, samples[i : i + micro_batch], pad_id, clip, None, None)
            for i in range(0, len(samples), micro_batch)
        ]
    return sum(float(p.loss_sum) for p in parts) / total
