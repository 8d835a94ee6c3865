"""Long-term memories and their audit trail."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

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
    """Fields left out stay as they are; none of them may be null (`SkipJsonSchema` keeps
    the `None` default out of the schema)."""

    user_id: Identifier
    content: Content | SkipJsonSchema[None] = None
    memory_type: MemoryType | SkipJsonSchema[None] = None
    # The bounds on the float alone: on the field they would be applied to a null too.
    importance: Annotated[float, Field(ge=0, le=1)] | SkipJsonSchema[None] = Field(
        default=None, description=INTRINSIC
    )
    pinned: bool | SkipJsonSchema[None] = None
    metadata: Metadata | SkipJsonSchema[None] = None
    reason: Annotated[str, Text(1000)] | None = Field(
        default=None, description="kept in the history"
    )


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
        description="reinforcement level: starts at 1 and grows by one with each counted use "
        "(docs/forgetting.md); retention = exp(−days since last use / S) with "
        "S = base_days · growth^(strength − 1)"
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
        "created",
        "updated",
        "superseded",
        "confirmed",
        "reinforced",
        "forgotten",
        "restored",
        "purged",
        "deleted",
    ]
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    reason: str | None
    created_at: datetime


class MemoryEventPage(BaseModel):
    items: list[MemoryEventOut]
    next_cursor: str | None
