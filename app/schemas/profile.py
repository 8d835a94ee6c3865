"""A user's profile: structured attributes (JSON merge-patch) and the facts learned."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from app.schemas.common import Source

MAX_PROFILE_BYTES = 32_000


class ProfileFact(BaseModel):
    id: uuid.UUID = Field(description="the memory holding the fact (GET /v1/memories/{id})")
    content: str
    memory_type: str
    importance: float
    valid_from: datetime | None = Field(description="when it became true (its event time)")
    created_at: datetime
    sources: list[Source]


class Profile(BaseModel):
    user_id: str
    attributes: dict[str, Any] = Field(
        description="structured attributes, changed by PATCH (JSON merge-patch, RFC 7396)"
    )
    facts: list[ProfileFact] = Field(
        description="the user's current semantic and procedural facts, newest first: "
        "learned by extraction (docs/facts.md) or written with POST /v1/memories"
    )
