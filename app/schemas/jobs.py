"""Background jobs as callers see them: state, attempts, the last error and the result."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

JobState = Literal["queued", "running", "succeeded", "failed"]


class JobOut(BaseModel):
    id: uuid.UUID
    kind: str
    key: str = Field(description="idempotency key: one job per (kind, key)")
    state: JobState
    attempts: int = Field(description="runs started, a runner that died counting as one")
    max_attempts: int
    last_error: str | None = Field(description="the error of the latest failed attempt")
    result: dict[str, Any] | None
    due_at: datetime = Field(description="when the job (or its next attempt) may run")
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
