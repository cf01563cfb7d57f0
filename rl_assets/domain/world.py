"""The reference world: eight documents, one of which holds the secret."""

from __future__ import annotations

from pathlib import Path

from rl_assets.domain.models import N_DOCS
from rl_assets.domain.seeding import rng

DOCS_DIR = "docs"


def world_secret(world_id: str) -> tuple[int, str]:
    """``(secret_doc, secret)`` of a world, from its two seeded draws."""
    r = rng("world", world_id)
    secret_doc = r.randrange(N_DOCS)
    secret = f"{world_id}-secret-{r.randrange(10**6):06d}"
    return secret_doc, secret


def world_documents(world_id: str) -> dict[str, str]:
    """Relative path -> text of every file of the world."""
    secret_doc, secret = world_secret(world_id)
    docs = {}
    for i in range(N_DOCS):
        lines = [f"title: report {i} for {world_id}", f"owner: team-{i % 3}", f"pages: {10 + i}"]
        if i == secret_doc:
            lines.append(f"secret: {secret}")
        docs[f"{DOCS_DIR}/doc_{i}.txt"] = "".join(line + "\n" for line in lines)
    return docs


def build_world(world_id: str, root: Path) -> None:
    """Write the world's files under ``root`` (which must be empty or absent)."""
    for rel, text in world_documents(world_id).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
