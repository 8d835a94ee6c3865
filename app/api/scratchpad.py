"""A session's scratchpad: the agent's working memory, one JSON object."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from app.api.deps import ScratchpadDep, SessionIdPath, TenantDep, UserIdQuery
from app.api.errors import problem_responses
from app.errors import BadRequest, BufferUnavailable, ScratchpadTooLarge, SessionNotFound
from app.schemas.scratchpad import ScratchpadOut, ScratchpadPut

router = APIRouter(prefix="/v1/sessions", tags=["scratchpad"])


@router.get(
    "/{session_id}/scratchpad",
    summary="The session's working memory",
    description="`{}` when it was never written, was deleted, or expired with the "
    "session's buffer. Reading it refreshes its TTL.",
    response_model=ScratchpadOut,
    responses=problem_responses(SessionNotFound, BufferUnavailable),
)
async def get_scratchpad(
    session_id: SessionIdPath, user_id: UserIdQuery, tenant: TenantDep, service: ScratchpadDep
) -> ScratchpadOut:
    return await service.get(tenant, session_id, user_id)


@router.put(
    "/{session_id}/scratchpad",
    summary="Replace the session's working memory",
    description="Stored in the session's buffer (Redis) with its TTL, and shown in the "
    "context's `working_memory` section. Working memory is not history: it is not in the "
    "message log, and a lost buffer reads back as `{}`.",
    response_model=ScratchpadOut,
    responses=problem_responses(BadRequest, SessionNotFound, ScratchpadTooLarge, BufferUnavailable),
)
async def put_scratchpad(
    session_id: SessionIdPath, body: ScratchpadPut, tenant: TenantDep, service: ScratchpadDep
) -> ScratchpadOut:
    return await service.put(tenant, session_id, body)


@router.delete(
    "/{session_id}/scratchpad",
    summary="Clear the session's working memory",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=problem_responses(SessionNotFound, BufferUnavailable),
)
async def delete_scratchpad(
    session_id: SessionIdPath, user_id: UserIdQuery, tenant: TenantDep, service: ScratchpadDep
) -> Response:
    await service.delete(tenant, session_id, user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
