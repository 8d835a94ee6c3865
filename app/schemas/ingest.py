"""Sessions and the messages sent to them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from app.schemas.common import Content, EventTime, Identifier, Metadata, StrictModel

Role = Literal["user", "assistant", "system", "tool"]


class SessionUpsert(StrictModel):
    user_id: Identifier
    system_prompt: Content | None = None
    metadata: Metadata = Field(default_factory=dict)

    model_config = {
        "json_schema_extra": {
            "examples": [{"user_id": "user-42", "system_prompt": "You are a helpful coach."}]
        }
    }


class SessionOut(BaseModel):
    id: str
    user_id: str
    system_prompt: str | None
    metadata: dict[str, Any]
    last_seq: int = Field(description="seq of the newest message in the log")
    indexed_seq: int = Field(description="messages up to this seq are searchable")
    created_at: datetime
    updated_at: datetime


GENERATED_ID_PREFIX = "seq:"
"""The prefix of the id a message sent without one is shown under (`seq:<n>`)."""


def _client_id(value: str | None) -> str | None:
    if value is not None and value.startswith(GENERATED_ID_PREFIX):
        raise ValueError(f"must not start with {GENERATED_ID_PREFIX!r}, the server's own ids")
    return value


class MessageIn(StrictModel):
    id: Annotated[Identifier | None, AfterValidator(_client_id)] = Field(
        default=None,
        description="client id; a retry with the same id is a duplicate. Not starting with "
        "`seq:`, the prefix of the ids shown for messages sent without one",
    )
    role: Role
    content: Content
    created_at: EventTime | None = Field(
        default=None,
        description="event time (may be in the past for imports); default now"
        "; at most 5 minutes ahead of the server's clock",
    )
    metadata: Metadata = Field(
        default_factory=dict, description="free-form; `name` is used as the speaker's name"
    )


class IngestRequest(StrictModel):
    user_id: Identifier
    messages: list[MessageIn] = Field(
        min_length=1,
        max_length=1000,
        description="1-1000 messages holding at most 200,000 characters of `content` in total "
        "(`STRATA_INGEST_MAX_CHARS`): more is a 413 `too_many_characters`",
    )
    wait: bool = Field(default=False, description="answer once these messages are searchable")

    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "user_id": "user-42",
                    "messages": [
                        {"id": "m1", "role": "user", "content": "I moved to Lisbon last May."},
                        {"id": "m2", "role": "assistant", "content": "How do you like it?"},
                    ],
                    "wait": True,
                }
            ]
        }
    }


class IngestResponse(BaseModel):
    accepted: int
    duplicates: int
    last_seq: int
    indexed_seq: int | None = Field(
        default=None, description="with wait=true: the session's indexed watermark"
    )


class MessageOut(BaseModel):
    id: str = Field(description="the client id, or `seq:<n>` when none was given")
    seq: int
    role: Role
    content: str
    created_at: datetime
    metadata: dict[str, Any]


class MessagePage(BaseModel):
    items: list[MessageOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the older messages")


class SessionDeleted(BaseModel):
    session_id: str
    messages: int
    memories: int
    summaries: int
