"""Recall: scored retrieval from long-term memory."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from app.schemas.common import (
    EventTime,
    FilterValue,
    Identifier,
    InstantTime,
    LLMUsage,
    MetadataKey,
    Query,
    Source,
    StrictModel,
)
from app.schemas.memories import MemoryType


class TimeRange(StrictModel):
    from_: InstantTime | None = Field(default=None, alias="from")
    to: InstantTime | None = None

    model_config = {"populate_by_name": True}

    @model_validator(mode="after")
    def _ordered(self) -> TimeRange:
        if self.from_ is not None and self.to is not None and self.from_ > self.to:
            raise ValueError("`from` must not be after `to`")
        return self


class ScoreWeights(StrictModel):
    """Relative weights; they are normalised to sum to 1."""

    semantic: float = Field(ge=0, le=100)
    recency: float = Field(ge=0, le=100)
    importance: float = Field(ge=0, le=100)


class RecallRequest(StrictModel):
    user_id: Identifier
    query: Query
    session_id: Identifier | None = None
    top_k: int = Field(default=10, ge=1, le=200)
    memory_types: list[MemoryType] | None = Field(default=None, min_length=1)
    kinds: list[Literal["memory", "summary"]] | None = Field(default=None, min_length=1)
    time_range: TimeRange | None = None
    metadata: dict[MetadataKey, FilterValue] | None = Field(default=None, max_length=16)
    weights: ScoreWeights | None = None
    rewrite: Literal["auto", "off"] = "auto"
    as_of: EventTime | None = Field(
        default=None, description="'now' for decay; hides what was created after it"
    )
    reinforce: bool = Field(default=True, description="count this recall as an access")

    model_config = {
        "json_schema_extra": {
            "examples": [{"user_id": "user-42", "query": "Where does the user live?", "top_k": 5}]
        }
    }


class Scores(BaseModel):
    semantic: float
    recency: float
    importance: float


class RecallResult(BaseModel):
    id: uuid.UUID
    kind: Literal["memory", "summary"]
    memory_type: MemoryType
    content: str
    score: float
    scores: Scores
    created_at: datetime
    last_accessed_at: datetime | None
    access_count: int
    sources: list[Source]
    metadata: dict[str, Any]


class RecallResponse(BaseModel):
    query: str
    rewritten_query: str | None = Field(
        description="the standalone query searched instead of `query` (`rewrite: auto` and a "
        "follow-up that leans on `session_id`'s last turns); null: searched as asked"
    )
    results: list[RecallResult]
    took_ms: float
    llm_usage: LLMUsage | None = Field(
        default=None, description="tokens an LLM spent on this recall (its rewrite)"
    )
