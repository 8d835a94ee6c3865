"""Recall: scored retrieval from long-term memory."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from app.core.relevance import CONFIDENT_RELEVANCE, DEFAULT_MIN_RELEVANCE
from app.schemas.common import (
    EventTime,
    FilterValue,
    Identifier,
    InstantTime,
    JsonInt,
    LLMUsage,
    MetadataKey,
    Query,
    Source,
    StrictModel,
    only_pattern_keys,
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
    session_id: Identifier | None = Field(
        default=None,
        description="the conversation the question is asked in: its last turns feed "
        "`rewrite: auto` (a follow-up is made standalone from them); it does not narrow the "
        "search, which covers all of the user's memories (`session_ids` narrows). After a "
        "rewrite, the memories of the turns it read (which the caller holds) come below the "
        "results from elsewhere that are confidently relevant (`scores.semantic` >= 0.25)",
    )
    session_ids: list[Identifier] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="narrows recall to memories sourced from one of these sessions",
    )
    top_k: JsonInt = Field(default=10, ge=1, le=200)
    memory_types: list[MemoryType] | None = Field(default=None, min_length=1)
    kinds: list[Literal["memory", "summary"]] | None = Field(default=None, min_length=1)
    time_range: TimeRange | None = None
    metadata: dict[MetadataKey, FilterValue] | None = Field(
        default=None, max_length=16, json_schema_extra=only_pattern_keys
    )
    weights: ScoreWeights | None = None
    rewrite: Literal["auto", "off"] = "auto"
    as_of: EventTime | None = Field(
        default=None,
        description="'now' for decay; hides what was created after it"
        "; at most 5 minutes ahead of the server's clock",
    )
    reinforce: bool = Field(default=True, description="count this recall as an access")
    min_relevance: float = Field(
        default=DEFAULT_MIN_RELEVANCE,
        ge=0,
        le=1,
        description="drop results whose `scores.semantic` (the calibrated relevance) is below "
        "this, before `top_k`: a question about something never mentioned returns few or no "
        f"results. Default {DEFAULT_MIN_RELEVANCE}, chosen on the benchmarks "
        "(bench/README.md) so that it does not hide the answer to an everyday question asked "
        f"in other words; from {CONFIDENT_RELEVANCE} a result is a confident one; 0 keeps "
        "everything. For a question about the user (not a query of keywords, nor one about "
        "what the assistant said), a turn that states nothing of the user's (the assistant's, "
        "or the user's asking it for something) needs twice the floor. With a floor, a "
        "question for a time, a number or a size (when, how many, what size) that none of the "
        "results tells gets no results, and so does a question about someone of "
        "the user's (my son, dad) when every result speaks only of someone else (my "
        "daughter, mom). Applies to memories; summaries, asked for by their period, are kept",
    )

    model_config = {
        "json_schema_extra": {
            "examples": [{"user_id": "user-42", "query": "Where does the user live?", "top_k": 5}]
        }
    }


class Scores(BaseModel):
    semantic: float = Field(
        description="calibrated relevance of the memory to the query in [0, 1], comparable "
        "across queries and users (a logistic over the query's cosine with the memory's own "
        "and indexed vectors and the share of the query's terms it holds); not a rank"
    )
    recency: float = Field(
        description="exp(−λ·days since the memory was last accessed, or created), in [0, 1]"
    )
    importance: float = Field(
        description="w·intrinsic + (1 − w)·access_count / the user's highest access_count "
        "(w = 0.7): how much it was judged to matter (the memory's `importance`, 1 if pinned) "
        "and how often it was found to"
    )


class RecallResult(BaseModel):
    id: uuid.UUID
    kind: Literal["memory", "summary"]
    memory_type: MemoryType
    content: str
    score: float = Field(
        description="the ranking score in [0, 1]: α·(½·rank fusion + ½·semantic) + β·recency "
        "+ γ·importance, weights normalised (docs/architecture.md §3). Results come in rank "
        "order, which the steps after scoring may change (the user's reply above the turn "
        "it answers, a newer statement above the older one): a later result can score higher"
    )
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
        "follow-up that leans on `session_id`'s last turns; the user named by their id put "
        "in the first person, 'Ana 住在哪里？' → '我住在哪里？'); null: searched as asked"
    )
    results: list[RecallResult]
    took_ms: float
    llm_usage: LLMUsage | None = Field(
        default=None, description="tokens an LLM spent on this recall (its rewrite)"
    )
