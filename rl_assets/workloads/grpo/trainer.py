"""``GRPOTrainer``: the :class:`~rl_assets.workloads.seams.Trainer` of ``--trainer grpo``, run in the actor.

The policy record names its base model, recipe and checkpoint directory (:mod:`...language_model`); the
weights and the optimiser state are files. An update:

1. takes the parent's model and optimiser: warm from the previous update in this actor when the parent is
   the policy it produced, else rebuilt from the parent's checkpoint directory (or the base weights at
   step 0), the RNG state with it;
2. reads the step's trajectories (checked against the batch's hashes), computes group-relative
   advantages, cuts each model call into a sample, and takes one micro-batched optimiser step;
3. writes the checkpoint directory (weights, optimiser and RNG state, step, parent hash, stats) before it
   returns, so the ledger row that follows always points at files on disk.

Deterministic on the CPU (deterministic kernels, one thread, no sampling in the update), and a restored
model and optimiser equal the warm ones bit for bit, so a rebuilt actor writes the bytes an uninterrupted
one would have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rl_assets.domain.experiment import LOCAL_POLICY_MODEL, ExperimentConfig
from rl_assets.domain.language_model import GRPORecipe, LanguageModelPolicy, StepStats
from rl_assets.domain.models import Policy, Reward
from rl_assets.workloads.grpo import checkpoint
from rl_assets.workloads.grpo.advantages import batch_advantages, group_of
from rl_assets.workloads.grpo.generation import copy_weights
from rl_assets.workloads.grpo.model import TINY_SEED, base_hash, deterministic, load_base
from rl_assets.workloads.grpo.samples import kind, trajectory_samples
from rl_assets.workloads.grpo.tokenizer import ChatTokenizer
from rl_assets.workloads.seams import TrainingWorkspace

SERVED_MODEL = LOCAL_POLICY_MODEL
"""The model name the policy's own server answers as: only its transcripts' token ids are this model's."""
MAX_TOKENS = 2048
"""The longest sample (prompt + response) trained on; the tiny model's context."""
BETAS = (0.9, 0.999)
CHECKPOINT_FORMAT = 1


@dataclass
class _Live:
    """A model and its optimiser in memory, with the policy they are."""

    policy_hash: str
    model: Any
    optimizer: Any
    tokenizer: ChatTokenizer
    rng: Any


def _optimizer(model: Any, lr: float) -> Any:
    import torch

    return torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, eps=1e-8, weight_decay=0.0, foreach=False)


def _lm(policy: Policy) -> LanguageModelPolicy:
    if policy.lm is None:
        raise ValueError("the grpo trainer was handed a policy that is not a language model's")
    return policy.lm


class GRPOTrainer:
    """Token-level GRPO on a causal LM; keeps the last model and optimiser warm between steps."""

    def __init__(self) -> None:
        self._live: _Live | None = None

    def initial(self, config: ExperimentConfig) -> Policy:
        if config.model is None or config.clip is None or config.micro_batch is None:
            raise ValueError("--trainer grpo needs --model, --clip and --micro-batch")
        recipe = GRPORecipe(
            clip=config.clip, kl_coef=config.kl_coef, micro_batch=config.micro_batch, max_tokens=MAX_TOKENS
        )
        lm = LanguageModelPolicy(base=config.model, base_hash=base_hash(config.model), recipe=recipe)
        return Policy(version=0, priors={}, lm=lm)

    def _restore(self, parent: Policy, workspace: TrainingWorkspace, lr: float) -> _Live:
        """The parent's model and optimiser from its checkpoint (the base weights at step 0)."""
        import torch

        lm = _lm(parent)
        model, tokenizer = load_base(lm.base)
        optimizer = _optimizer(model, lr)
        if lm.checkpoint is None:
            with torch.random.fork_rng():
                torch.manual_seed(TINY_SEED)
                rng = torch.get_rng_state()
            return _Live(parent.content_hash, model, optimizer, tokenizer, rng)
        saved = checkpoint.read(workspace.models, lm.checkpoint)
        copy_weights(model, saved, lm)
        optimizer.load_state_dict(checkpoint.optimizer_state(saved))
        return _Live(parent.content_hash, model, optimizer, tokenizer, saved.optimizer[checkpoint.RNG_KEY])

    def update(self, parent: Policy, batch: list[Reward], lr: float, workspace: TrainingWorkspace) -> Policy:
        import torch

        from rl_assets.workloads.grpo.loss import grpo_step

        deterministic()
        lm = _lm(parent)
        live, self._live = self._live, None  # an update that fails half-way must leave no half-stepped model warm
        if live is None or live.policy_hash != parent.content_hash:
            live = self._restore(parent, workspace, lr)
        advantages = batch_advantages(batch)
        samples = [
            sample
            for reward, advantage in zip(batch, advantages, strict=True)
            for sample in trajectory_samples(
                workspace.trajectory(reward), advantage, live.tokenizer, SERVED_MODEL, lm.recipe.max_tokens
            )
        ]
        reference = load_base(lm.base)[0] if lm.recipe.kl_coef is not None else None
        torch.set_rng_state(live.rng)
        result = grpo_step(
            live.model,
            live.optimizer,
            samples,
            live.tokenizer.pad_id,
            lr,
            lm.recipe.clip,
            lm.recipe.micro_batch,
            lm.recipe.kl_coef,
            reference,
        )
        stats = StepStats(
            objective=kind([s.old_logprobs is not None for s in samples], "clipped-ratio", "reinforce"),
            token_source=kind([s.recorded for s in samples], "recorded", "retokenized"),
            samples=len(samples),
            groups=len({group_of(r.trial_id) for r in batch}),
            response_tokens=result.tokens,
            truncated_samples=sum(s.truncated for s in samples),
            loss=round(result.loss, 6),
            clipped_fraction=round(result.clipped_fraction, 6),
            kl=None if result.kl is None else round(result.kl, 6),
        )
        state = {
            "format": CHECKPOINT_FORMAT,
            "step": parent.version + 1,
            "parent_hash": parent.content_hash,
            "base": lm.base,
            "base_hash": lm.base_hash,
            "recipe": lm.recipe.model_dump(mode="json"),
            "lr": lr,
            "stats": stats.model_dump(mode="json"),
        }
        digest = checkpoint.write(workspace.models, checkpoint.encode(live.model, live.optimizer, state))
        parameters = sum(p.numel() for p in live.model.parameters())
        new = Policy(
            version=parent.version + 1,
            priors={},
            lm=LanguageModelPolicy.model_validate(
                {**lm.model_dump(), "checkpoint": digest, "parameters": parameters, "stats": stats.model_dump()}
            ),
        )
        self._live = _Live(new.content_hash, live.model, live.optimizer, live.tokenizer, torch.get_rng_state())
        return new

    def checkpoint(self, policy: Policy) -> str:
        return policy.model_dump_json()

    def restore(self, checkpoint: str) -> Policy:
        return Policy.model_validate_json(checkpoint)
