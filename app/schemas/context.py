"""The context window assembled for one model call."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from app.schemas.common import EventTime, Identifier, JsonInt, LLMUsage, Query, StrictModel
from app.schemas.ingest import MessageOut
from app.schemas.profile import ProfileFact
from app.schemas.recall import RecallResult


class ContextRequest(StrictModel):
    user_id: Identifier
    query: Query | None = Field(default=None, description="default: the last user message")
    token_budget: JsonInt = Field(default=4000, ge=1, le=200_000)
    as_of: EventTime | None = Field(
        default=None,
        description="as in recall: 'now' for decay; nothing created after it"
        "; at most 5 minutes ahead of the server's clock",
    )
    rewrite: Literal["auto", "off"] = Field(
        default="auto",
        description="auto: a follow-up (a pronoun, an ellipsis) is made standalone from the "
        "session's last turns before recall",
    )

    model_config = {
        "json_schema_extra": {"examples": [{"user_id": "user-42", "token_budget": 4000}]}
    }


class SummaryOut(BaseModel):
    level: str
    period_start: datetime
    content: str


class ContextProfile(TypedDict, total=False):
    """What of the user's profile fit the budget; a part with nothing kept is absent, so an
    empty profile is `{}`."""

    attributes: Annotated[
        dict[str, Any], Field(description="the profile's attributes that fit (free-form)")
    ]
    facts: Annotated[list[ProfileFact], Field(description="current facts, newest first")]


class ContextSections(BaseModel):
    system_prompt: str
    working_memory: dict[str, Any]
    profile: ContextProfile = Field(
        description="what of the user's profile fit: `attributes` and `facts`, each absent "
        "when none fit; `{}` when the profile is empty"
    )
    summaries: list[SummaryOut]
    memories: list[RecallResult]
    recent_messages: list[MessageOut]


class ContextTokens(BaseModel):
    """Tokens of each section's block as rendered, and of the whole `text`."""

    system_prompt: int
    working_memory: int
    profile: int
    summaries: int
    memories: int
    recent_messages: int
    total: int = Field(description="tokens of `text`: never more than `token_budget`")


class ContextDropped(BaseModel):
    """Items of each section left out for the budget (the system prompt is never cut)."""

    working_memory: int
    profile: int
    summaries: int
    memories: int
    recent_messages: int


class ContextResponse(BaseModel):
    sections: ContextSections
    text: str = Field(
        description="the sections rendered as one prompt, each under its heading (`## …`). "
        "Stored content is data, set off so that it cannot pass for a heading or a section: "
        "every item but the system prompt starts after a bullet or a speaker, its further "
        "lines are indented by two spaces, and a line of it opening with `#` or `\\` is "
        "escaped with a backslash. The system prompt is the caller's own, as given."
    )
    tokens: ContextTokens = Field(description="per section, and `total` = tokens of `text`")
    token_budget: int
    tokenizer: str
    dropped: ContextDropped = Field(description="items per section left out for the budget")
    truncated: dict[str, list[int]] = Field(
        default_factory=dict,
        description="items shown cut, per section: `recent_messages` lists the `seq` of the "
        "last user message when it was too long for the budget and is shown with its middle "
        "elided (`head … [n tokens elided] … tail`, within its section's share of the "
        "budget, so the other sections keep room); `{}` when nothing was cut",
        examples=[{"recent_messages": [42]}],
    )
    rewritten_query: str | None = Field(
        default=None, description="the standalone query recall searched, when it was rewritten"
    )
    llm_usage: LLMUsage | None = Field(
        default=None, description="tokens an LLM spent on this context (its rewrite)"
    )
