"""A GRPO step's checkpoint: a content-addressed directory of safetensors and JSON, named by its digest.

``model.safetensors`` holds the trainable parameters, ``optimizer.safetensors`` the optimiser's state and
the torch RNG state, ``state.json`` the step, the parent policy's hash, the base, the recipe, the learning
rate, the optimiser's hyper-parameters and the step's stats. The directory's name is the digest of the
three files' bytes, so a policy that names it pins every byte; it is written to a temporary directory and
renamed into place (a reader never sees half a checkpoint), and checked against its name when read.
Nothing in it depends on the time or the host, so equal steps write byte-identical directories.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "state.json"
FILES = (MODEL_FILE, OPTIMIZER_FILE, STATE_FILE)
RNG_KEY = "rng.torch"


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, or its bytes are not the ones its name pins."""


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint's contents, as tensors and JSON."""

    parameters: dict[str, Any]
    optimizer: dict[str, Any]
    """The optimiser's per-parameter state, keyed ``state.<index>.<name>``, and the RNG state (``rng.torch``)."""
    state: dict[str, Any]


def digest_of(files: dict[str, bytes]) -> str:
    """The digest naming a checkpoint: sha256 over each file's name and sha256 (16 hex digits)."""
    h = hashlib.sha256()
    for name in FILES:
        h.update(f"{name}\0{hashlib.sha256(files[name]).hexdigest()}\n".encode())
    return h.hexdigest()[:16]


def encode(model: Any, optimizer: Any, state: dict[str, Any]) -> dict[str, bytes]:
    """The three files of a checkpoint of ``model`` and ``optimizer`` (the RNG state is the current one)."""
    import torch
    from safetensors.torch import save

    parameters = {name: p.detach().contiguous() for name, p in model.named_parameters()}
    saved = optimizer.state_dict()
    tensors = {
        f"state.{index}.{key}": value.detach().contiguous()
        for index, values in saved["state"].items()
        for key, value in values.items()
    }
    tensors[RNG_KEY] = torch.get_rng_state()
    groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()} for g in saved["param_groups"]]
    body = {**state, "optimizer_groups": groups}
    return {
        MODEL_FILE: save(parameters),
        OPTIMIZER_FILE: save(tensors),
        STATE_FILE: json.dumps(body, sort_keys=True, separators=(",", ":")).encode(),
    }


def write(root: Path, files: dict[str, bytes]) -> str:
    """Store ``files`` under ``root/<digest>`` (once: an existing directory of that digest is kept); the digest."""
    digest = digest_of(files)
    target = root / digest
    if target.is_dir():
        read(root, digest)  # verified: a damaged copy under the name is an error, never silently kept
        return digest
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{digest}.{os.getpid()}-{uuid.uuid4().hex}.tmp"
    tmp.mkdir()
    try:
        for name, data in files.items():
            with open(tmp / name, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():  # another writer's identical directory won the rename otherwise
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return digest


def read_files(root: Path, digest: str) -> dict[str, bytes]:
    """The bytes of checkpoint ``digest``, checked against its name."""
    directory = root / digest
    try:
        files = {name: (directory / name).read_bytes() for name in FILES}
    except FileNotFoundError as err:
        raise CheckpointError(f"checkpoint {digest} is missing under {root} ({err.filename})") from None
    if digest_of(files) != digest:
        raise CheckpointError(f"checkpoint {directory} does not match its digest: damaged")
    return files


def read(root: Path, digest: str) -> Checkpoint:
    """Checkpoint ``digest``, verified, decoded."""
    from safetensors.torch import load

    files = read_files(root, digest)
    return Checkpoint(
        parameters=load(files[MODEL_FILE]), optimizer=load(files[OPTIMIZER_FILE]), state=json.loads(files[STATE_FILE])
    )


def optimizer_state(checkpoint: Checkpoint) -> dict[str, Any]:
    """The optimiser's ``state_dict`` from a checkpoint (to ``load_state_dict`` into a fresh optimiser)."""
    state: dict[int, dict[str, Any]] = {}
    for key, value in checkpoint.optimizer.items():
        if key == RNG_KEY:
            continue
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": checkpoint.state["optimizer_groups"]}
