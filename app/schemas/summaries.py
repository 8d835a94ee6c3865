"""Hierarchical summaries: a user's daily, weekly and essence summaries."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.schemas.common import Identifier, IsoDate, LLMUsage, Source, StrictModel

SummaryLevel = Literal["daily", "weekly", "essence"]


class SummarizeRequest(StrictModel):
    user_id: Identifier
    level: SummaryLevel
    period_start: IsoDate | None = Field(
        default=None,
        description="a local day (the user's profile `timezone`, default UTC) in the period: "
        "that day, or that day's ISO week (Monday first). Default: the latest closed period. "
        "Ignored for the essence, which covers every weekly.",
    )

    model_config = {"json_schema_extra": {"examples": [{"user_id": "user-42", "level": "daily"}]}}


class SummarizeAccepted(BaseModel):
    job_id: uuid.UUID = Field(description="`GET /v1/jobs/{job_id}` follows it")
    key: str = Field(description="the job's key: one job per user, level and period")


class SummarySource(BaseModel):
    """A summary a weekly or the essence was written from."""

    id: uuid.UUID
    level: Literal["daily", "weekly"]
    period_start: str = Field(
        description="its period's start (ISO 8601, as stored)",
        json_schema_extra={"format": "date-time"},
    )


class SummaryItem(BaseModel):
    id: uuid.UUID = Field(description="deterministic from the user, level and period_start")
    level: SummaryLevel
    period_start: datetime = Field(description="the local period's start, as a UTC instant")
    period_end: datetime = Field(description="its end (exclusive)")
    timezone: str
    content: str
    sources: list[Source | SummarySource] = Field(
        description="daily: the messages (`Source`); weekly: the dailies, essence: the "
        "weeklies (`SummarySource`)"
    )
    tokens: int = Field(description="tokens of `content` (the service's tokenizer)")
    method: Literal["extractive", "llm"]
    llm_usage: LLMUsage | None = Field(
        default=None, description="tokens the LLM spent on it (`method` llm)"
    )
    created_at: datetime
    updated_at: datetime


class SummaryPage(BaseModel):
    items: list[SummaryItem]
    next_cursor: str | None
