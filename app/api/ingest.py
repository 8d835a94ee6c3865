"""Sessions and message ingest."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from app.api.deps import IngestDep, LimitQuery, SessionIdPath, TenantDep, UserIdQuery
from app.api.errors import problem_responses
from app.errors import (
    BadRequest,
    InvalidCursor,
    SessionNotFound,
    TooManyCharacters,
    UserErasureInProgress,
    VectorStoreUnavailable,
)
from app.schemas.common import Text
from app.schemas.ingest import (
    IngestRequest,
    IngestResponse,
    MessagePage,
    SessionDeleted,
    SessionOut,
    SessionUpsert,
)

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


@router.put(
    "/{session_id}",
    summary="Create or update a session",
    description="A session id is unique within its user: another `user_id` naming the same "
    "id gets a session of its own, as for an id never used (no answer tells whether another "
    "user holds an id).",
    response_model=SessionOut,
    responses={
        201: {"model": SessionOut, "description": "created"},
        **problem_responses(BadRequest, SessionNotFound, UserErasureInProgress),
    },
)
async def put_session(
    session_id: SessionIdPath,
    body: SessionUpsert,
    tenant: TenantDep,
    ingest: IngestDep,
    response: Response,
) -> SessionOut:
    session, created = await ingest.upsert_session(tenant, session_id, body)
    if created:
        response.status_code = status.HTTP_201_CREATED
    return session


@router.get(
    "/{session_id}",
    summary="A session, with its log and index watermarks",
    description="With `wait=true`, answers once `indexed_seq` has reached the `last_seq` "
    "the session had when the request arrived (or the server's wait limit passed: compare "
    "the two). The bulk-import path: send many batches with `wait=false`, then wait here "
    "once.",
    response_model=SessionOut,
    responses=problem_responses(SessionNotFound),
)
async def get_session(
    session_id: SessionIdPath,
    user_id: UserIdQuery,
    tenant: TenantDep,
    ingest: IngestDep,
    wait: Annotated[
        bool, Query(description="answer once the index has caught up with the log")
    ] = False,
) -> SessionOut:
    return await ingest.get_session(tenant, session_id, user_id, wait=wait)


@router.delete(
    "/{session_id}",
    summary="Delete a session, its messages and what was derived only from it",
    response_model=SessionDeleted,
    responses=problem_responses(SessionNotFound, VectorStoreUnavailable),
)
async def delete_session(
    session_id: SessionIdPath, user_id: UserIdQuery, tenant: TenantDep, ingest: IngestDep
) -> SessionDeleted:
    return await ingest.delete_session(tenant, session_id, user_id)


@router.post(
    "/{session_id}/messages",
    summary="Append messages to the session's log",
    description="Answers `202` once the messages are durable; with `wait=true`, `200` once "
    "they are also searchable (`202` with the watermark reached if indexing outlasts "
    "the server's wait limit). A message whose client `id` is already stored counts as a "
    "duplicate, so retries are safe. The session is created on first use.",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=IngestResponse,
    responses={
        200: {"model": IngestResponse, "description": "indexed (wait=true)"},
        **problem_responses(BadRequest, SessionNotFound, TooManyCharacters, UserErasureInProgress),
    },
)
async def add_messages(
    session_id: SessionIdPath,
    body: IngestRequest,
    tenant: TenantDep,
    ingest: IngestDep,
    response: Response,
) -> IngestResponse:
    result = await ingest.add_messages(tenant, session_id, body)
    if body.wait and result.indexed_seq is not None and result.indexed_seq >= result.last_seq:
        response.status_code = status.HTTP_200_OK
    return result


@router.get(
    "/{session_id}/messages",
    summary="The session's history, newest last",
    description="A page of the newest messages; `next_cursor`, passed as `cursor`, gives the "
    "page before it. `before_seq` pages by seq instead (not with `cursor`).",
    response_model=MessagePage,
    responses=problem_responses(SessionNotFound, InvalidCursor),
)
async def get_messages(
    session_id: SessionIdPath,
    user_id: UserIdQuery,
    tenant: TenantDep,
    ingest: IngestDep,
    limit: LimitQuery = 50,
    cursor: Annotated[
        str | None, Text(512), Query(description="from `next_cursor`: the older messages")
    ] = None,
    before_seq: Annotated[
        int | None,
        Query(ge=1, le=2**63 - 1, description="page before this seq (not with `cursor`)"),
    ] = None,
) -> MessagePage:
    return await ingest.list_messages(tenant, session_id, user_id, cursor, before_seq, limit)
