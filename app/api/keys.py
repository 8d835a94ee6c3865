"""API keys: create (the key is shown once), list, revoke. Scope admin (docs/security.md)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, status

from app.api.deps import KeyDep, LimitQuery, PrincipalDep
from app.api.errors import problem_responses
from app.errors import BadRequest, Forbidden, InvalidCursor, KeyNotFound
from app.schemas.common import ID_PATTERN, ID_RULES, Text
from app.schemas.keys import KeyCreate, KeyCreated, KeyPage, KeyRevoked

router = APIRouter(prefix="/v1/admin/keys", tags=["keys"])


@router.post(
    "",
    summary="Create an API key (shown once)",
    description="The answer carries the key itself, `sk_strata_<id>_<secret>`, this once: "
    "only a SHA-256 of the secret is stored. The operator's key (`STRATA_ADMIN_KEY`) makes "
    "keys for any tenant; a tenant's admin key for its own. A key with `user_id` may only "
    "make requests about that user.",
    status_code=status.HTTP_201_CREATED,
    response_model=KeyCreated,
    responses=problem_responses(BadRequest, Forbidden),
)
async def create_key(body: KeyCreate, caller: PrincipalDep, keys: KeyDep) -> KeyCreated:
    tenant = keys.managed_tenant(caller, body.tenant) or caller.tenant_id
    return await keys.create(tenant, body)


@router.get(
    "",
    summary="List API keys (never the keys themselves)",
    description="By id. The operator sees every tenant's keys unless `tenant` is given; a "
    "tenant's admin key sees its own tenant's.",
    response_model=KeyPage,
    responses=problem_responses(Forbidden, InvalidCursor),
)
async def list_keys(
    caller: PrincipalDep,
    keys: KeyDep,
    tenant: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=128,
            pattern=ID_PATTERN,
            description=ID_RULES,
            examples=["acme"],
        ),
    ] = None,
    include_revoked: bool = False,
    cursor: Annotated[str | None, Text(64), Query(description="from `next_cursor`")] = None,
    limit: LimitQuery = 50,
) -> KeyPage:
    return await keys.page(keys.managed_tenant(caller, tenant), cursor, limit, include_revoked)


@router.delete(
    "/{key_id}",
    summary="Revoke an API key",
    description="From now on in this process, and within `key_cache_seconds` in every "
    "other. Revoking a revoked key answers its first revocation.",
    response_model=KeyRevoked,
    responses=problem_responses(KeyNotFound),
)
async def revoke_key(key_id: uuid.UUID, caller: PrincipalDep, keys: KeyDep) -> KeyRevoked:
    return await keys.revoke(keys.managed_tenant(caller, None), key_id)
