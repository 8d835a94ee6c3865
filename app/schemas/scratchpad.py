"""A session's scratchpad: the agent's working memory, one JSON object."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from app.schemas.common import Identifier, JsonObject, StrictModel


class ScratchpadPut(StrictModel):
    user_id: Identifier
    data: JsonObject = Field(
        description="replaces the whole scratchpad; at most `STRATA_SCRATCHPAD_MAX_BYTES` "
        "(16 KiB by default) of serialised JSON, else a 413 `scratchpad_too_large`"
    )

    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "user_id": "user-42",
                    "data": {"goal": "book a flight to Porto", "step": 2, "dates": ["06-03"]},
                }
            ]
        }
    }


class ScratchpadOut(BaseModel):
    session_id: str
    data: dict[str, Any] = Field(
        description="the working memory; `{}` when never written, deleted, or expired"
    )
    updated_at: datetime | None = Field(description="when `data` was last written; null if empty")
    ttl_seconds: int = Field(
        description="it expires, with the session's buffer, after this long without activity "
        "(any read or write of the scratchpad or the session's messages)"
    )
