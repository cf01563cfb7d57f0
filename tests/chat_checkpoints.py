"""Checkpoint directories with a real Hugging Face tokenizer and chat template, small enough for the fast tier.

A byte-level BPE tokenizer (no merges: one token a byte) with ChatML's specials, saved with a given template,
is a checkpoint's tokenizer as transformers loads it; beside it, :func:`chat_checkpoint` saves a two-layer
Llama over that vocabulary. Together they take the path a real model (SmolLM2) takes, at the tiny model's cost.
"""

from __future__ import annotations

from pathlib import Path

CONTENT_ONLY = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML rendering ``content`` alone, as SmolLM2-Instruct's template does: tool calls and tools vanish."""
NATIVE_TOOLS = (
    "{% if tools %}<|im_start|>system\nTOOLS {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Tools and tool calls rendered by the template itself (Qwen's and Hermes' way)."""
CALLS_NOT_TEXT = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role != 'assistant' %}{{ m.content }}{% endif %}"
    "{% for c in m.tool_calls or [] %}{{ c.function | tojson }}{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A broken template: an assistant's tool calls rendered, its text never."""
BASH = {"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": {}}}


def chat_tokenizer(directory: Path, template: str) -> Path:
    """A byte-level BPE tokenizer with ChatML's specials and ``template``, saved as a checkpoint directory's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|im_end|>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = template
    tokenizer.save_pretrained(directory)
    return directory


def chat_checkpoint(directory: Path, template: str = CONTENT_ONLY, seed: int = 0) -> Path:
    """A tiny Llama (its weights drawn from ``seed``) with :func:`chat_tokenizer`'s tokenizer: ``--model DIR``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(chat_tokenizer(directory, template))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        LlamaForCausalLM(config).save_pretrained(directory)
    return directory
