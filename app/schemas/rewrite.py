"""Query rewriting: a follow-up made standalone."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from app.schemas.common import Identifier, LLMUsage, Query, StrictModel


class RewriteRequest(StrictModel):
    user_id: Identifier
    session_id: Identifier
    query: Query

    model_config = {
        "json_schema_extra": {
            "examples": [{"user_id": "user-42", "session_id": "session-1", "query": "那摔伤算吗？"}]
        }
    }


class RewriteResponse(BaseModel):
    query: str
    rewritten: str = Field(description="the standalone query (the query itself if unchanged)")
    changed: bool
    method: Literal["llm", "heuristic", "none"] = Field(
        description="`none`: self-contained, or nothing in the session to resolve it with"
    )
    usage: LLMUsage | None = Field(
        default=None, description="the LLM's token usage, when an LLM was called"
    )
