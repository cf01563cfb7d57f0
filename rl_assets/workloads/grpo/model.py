"""The causal LM a grpo experiment trains: ``tiny`` (built from a config, seeded) or a checkpoint directory.

``tiny`` is a 2-layer Llama of hidden size 64 over :class:`ByteChatTokenizer`'s 264 ids: about 116k
parameters, built from a seed with no download, fast enough to train in tests on a CPU. A path is any
local directory transformers loads (``config.json`` and safetensors weights; a tokenizer with a chat
template, or the byte tokenizer's marker file as :func:`save_tiny` writes).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from rl_assets.domain.language_model import TINY_MODEL
from rl_assets.workloads.grpo.tokenizer import SPECIALS, ByteChatTokenizer, ChatTokenizer, load_tokenizer

TINY_SEED = 0
TINY_BUILD = "tiny-llama-2x64-bytes-v1"
"""The tiny model's base identity: change it whenever :func:`_tiny_config` or the seed changes."""
THREADS = 1
"""Intra-op threads in the actor: one, so reductions run in one order and a step is bit-reproducible."""


def deterministic() -> None:
    """The settings that make a CPU step bit-reproducible: deterministic kernels, one intra-op thread."""
    import torch

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(THREADS)


def _tiny_config() -> Any:
    from transformers import LlamaConfig

    tokenizer = ByteChatTokenizer()
    return LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_id,
        bos_token_id=256 + SPECIALS.index("<|bos|>"),
        eos_token_id=256 + SPECIALS.index("<|eos|>"),
    )


def build_tiny() -> Any:
    """The tiny model, its weights drawn from :data:`TINY_SEED` (the same bytes on every call)."""
    import torch
    from transformers import LlamaForCausalLM

    deterministic()
    with torch.random.fork_rng():
        torch.manual_seed(TINY_SEED)
        model = LlamaForCausalLM._from_config(_tiny_config(), attn_implementation="eager", dtype=torch.float32)
    return model


def save_tiny(directory: Path) -> None:
    """Write the tiny model as a checkpoint directory that ``--model PATH`` loads (weights and tokenizer marker)."""
    directory.mkdir(parents=True, exist_ok=True)
    build_tiny().save_pretrained(directory)
    ByteChatTokenizer().save(directory)


def base_tokenizer(base: str) -> ChatTokenizer:
    """The tokenizer of ``--model`` alone (no weights are loaded): what re-tokenizes a transcript for it."""
    return ByteChatTokenizer() if base == TINY_MODEL else load_tokenizer(Path(base))


def load_base(base: str) -> tuple[Any, ChatTokenizer]:
    """The base model (in float32, eager attention) and its tokenizer."""
    if base == TINY_MODEL:
        return build_tiny(), base_tokenizer(base)
    import torch
    from transformers import AutoModelForCausalLM

    deterministic()
    model = AutoModelForCausalLM.from_pretrained(
        Path(base), dtype=torch.float32, attn_implementation="eager", local_files_only=True
    )
    return model, base_tokenizer(base)


def base_hash(base: str) -> str:
    """The identity of the base weights: the tiny build, or a digest of every file of the directory."""
    if base == TINY_MODEL:
        return TINY_BUILD
    directory = Path(base)
    if not (directory / "config.json").is_file():
        raise ValueError(f"--model {base}: not a checkpoint directory (no config.json)")
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(directory).as_posix()}\0".encode())
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]
