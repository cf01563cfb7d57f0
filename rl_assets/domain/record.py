"""The base of every durable record: immutable, strict, content-addressed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from rl_assets.domain.hashing import content_hash


class Record(BaseModel):
    """Base of every durable record: immutable, strict, content-addressed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def content_hash(self) -> str:
        """sha256 of the canonical JSON of this record (16 hex digits)."""
        return content_hash(self.model_dump(mode="json"))
