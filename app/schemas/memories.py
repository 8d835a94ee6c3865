"""Long-term memories and their audit trail."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.schemas.common import Content, Identifier, Metadata, Source, StrictModel, Text

MemoryType = Literal["episodic", "semantic", "procedural"]


INTRINSIC = (
    "intrinsic importance in [0, 1]: how much the memory matters in itself, set by its writer "
    "(a caller, or promotion's heuristic). Recall's `scores.importance` blends it with how "
    "often the memory was recalled"
)


class MemoryCreate(StrictModel):
    user_id: Identifier
    content: Content
    memory_type: MemoryType
    importance: float | None = Field(default=None, ge=0, le=1, description=INTRINSIC)
    pinned: bool = False
    metadata: Metadata = Field(default_factory=dict)
    session_id: Identifier | None = None

    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "user_id": "user-42",
                    "content": "Prefers answers in Portuguese.",
                    "memory_type": "semantic",
                    "importance": 0.8,
                }
            ]
        }
    }


class MemoryPatch(StrictModel):
    user_id: Identifier
    content: Content | None = None
    memory_type: MemoryType | None = None
    importance: float | None = Field(default=None, ge=0, le=1, description=INTRINSIC)
    pinned: bool | None = None
    metadata: Metadata | None = None
    reason: Text | None = Field(default=None, max_length=1000, description="kept in the history")


class MemoryOut(BaseModel):
    id: uuid.UUID
    user_id: str
    session_id: str | None
    memory_type: MemoryType
    content: str
    importance: float = Field(description=INTRINSIC)
    pinned: bool
    access_count: int
    last_accessed_at: datetime | None
    strength: float = Field(
        description="retention strength: starts at 1 and grows by one with each recall; "
        "retention = exp(−days since last access / strength)"
    )
    sources: list[Source]
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    valid_from: datetime | None = Field(default=None, description="when it became true")
    valid_to: datetime | None = Field(
        default=None,
        description="when it stopped being true (a fact superseded or contradicted; "
        "docs/facts.md); null while it holds",
    )
    superseded_by: uuid.UUID | None = Field(
        default=None, description="the fact that replaced this one"
    )


class MemoryPage(BaseModel):
    items: list[MemoryOut]
    next_cursor: str | None


class MemoryEventOut(BaseModel):
    id: int
    memory_id: uuid.UUID
    event: Literal[
        "created", "updated", "superseded", "confirmed", "reinforced", "forgotten", "deleted"
    ]
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    reason: str | None
    created_at: datetime


class MemoryEventPage(BaseModel):
    items: list[MemoryEventOut]
    next_cursor: str | None
