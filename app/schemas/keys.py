"""API keys as the admin endpoints see them: create (the key shown once), list, revoke."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.schemas.common import TEXT_RULES, Identifier, StrictModel, Text

ScopeName = Literal["read", "write", "admin"]


def _read_write() -> list[ScopeName]:
    return ["read", "write"]


class KeyCreate(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"tenant": "acme", "user_id": "user-42", "scopes": ["read", "write"]},
                {"tenant": "acme", "name": "backoffice", "scopes": ["read", "write", "admin"]},
            ]
        },
    )

    tenant: Identifier | None = Field(
        default=None,
        description="the tenant the key belongs to; only the operator's key (STRATA_ADMIN_KEY) "
        "may name another tenant than its own. Default: the caller's tenant (the operator's: "
        "the default tenant)",
        examples=["acme"],
    )
    user_id: Identifier | None = Field(
        default=None,
        description="bind the key to this user: any request about another user is a 403",
    )
    scopes: list[ScopeName] = Field(
        default_factory=_read_write,
        min_length=1,
        max_length=3,
        description="write implies read; admin manages the tenant's keys (never with user_id)",
    )
    name: Annotated[str, Text(128)] = Field(
        default="", description=f"a label for people; {TEXT_RULES}"
    )
    rate_limit_per_second: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="this key's sustained rate; default: the server's (0 there: no limit)",
    )
    rate_limit_burst: int | None = Field(
        default=None, ge=1, le=1_000_000, description="this key's bucket size"
    )

    @field_validator("scopes")
    @classmethod
    def _distinct(cls, value: list[ScopeName]) -> list[ScopeName]:
        if len(set(value)) != len(value):
            raise ValueError("scopes must not repeat")
        return value


class KeyOut(BaseModel):
    id: uuid.UUID
    tenant: str
    name: str
    scopes: list[ScopeName]
    user_id: str | None = Field(description="the user the key is bound to, if any")
    rate_limit_per_second: float | None
    rate_limit_burst: int | None
    created_at: datetime
    revoked_at: datetime | None


class KeyCreated(KeyOut):
    key: str = Field(
        description="the key itself, `sk_strata_<id>_<secret>`: shown this once, never again "
        "(only a hash of the secret is stored)",
        examples=["sk_strata_0f8e4c2ab1d94d7e8a6b5c4d3e2f1a0b_Zq8...redacted"],
    )


class KeyPage(BaseModel):
    items: list[KeyOut]
    next_cursor: str | None


class KeyRevoked(BaseModel):
    id: uuid.UUID
    revoked_at: datetime
    state: Literal["revoked"] = "revoked"
