"""Long-term memories: CRUD and the audit trail."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from app.api.deps import ForgettingDep, LimitQuery, MemoryDep, RecallDep, TenantDep, UserIdQuery
from app.api.errors import problem_responses
from app.errors import (
    BadRequest,
    EmbeddingRejected,
    InvalidCursor,
    MemoryNotForgotten,
    MemoryNotFound,
    MemoryPurged,
    MethodNotAllowed,
    ProviderTimeout,
    ProviderUnavailable,
    SessionNotFound,
    UserErasureInProgress,
    VectorStoreUnavailable,
)
from app.schemas.common import Text
from app.schemas.forgetting import FeedbackAccepted, FeedbackRequest
from app.schemas.memories import (
    MemoryCreate,
    MemoryEventPage,
    MemoryOut,
    MemoryPage,
    MemoryPatch,
    MemoryType,
)
from app.services.memories import memory_out

router = APIRouter(prefix="/v1/memories", tags=["memories"])

CursorQuery = Annotated[str | None, Text(512), Query(description="from `next_cursor`")]


@router.post(
    "",
    summary="Store a memory",
    status_code=status.HTTP_201_CREATED,
    response_model=MemoryOut,
    responses=problem_responses(
        BadRequest,
        SessionNotFound,
        UserErasureInProgress,
        EmbeddingRejected,
        ProviderUnavailable,
        ProviderTimeout,
        VectorStoreUnavailable,
    ),
)
async def create_memory(body: MemoryCreate, tenant: TenantDep, memories: MemoryDep) -> MemoryOut:
    return await memories.create(tenant, body)


@router.post(
    "/feedback",
    summary="Tell which recalled memories were used (reinforced) and which were useless",
    description="Counted off the request path and written in batches (about once a second), "
    "like recall's reinforcement: one `reinforced` event per memory per flush in its history. "
    "Ids that are not this user's live memories are ignored and listed.",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=FeedbackAccepted,
    responses=problem_responses(BadRequest),
)
async def send_feedback(
    body: FeedbackRequest, tenant: TenantDep, recall: RecallDep
) -> FeedbackAccepted:
    return await recall.feedback(tenant, body)


@router.api_route("/feedback", methods=["GET", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def feedback_other_methods() -> None:
    """`feedback` is a word, not a memory id: without this, `PATCH /v1/memories/feedback`
    would reach the memory routes and answer 422 about the id instead of 405."""
    raise MethodNotAllowed("use POST on /v1/memories/feedback", headers={"Allow": "POST"})


@router.get(
    "",
    summary="List a user's memories, newest first",
    response_model=MemoryPage,
    responses=problem_responses(InvalidCursor),
)
async def list_memories(
    user_id: UserIdQuery,
    tenant: TenantDep,
    memories: MemoryDep,
    memory_type: MemoryType | None = None,
    cursor: CursorQuery = None,
    limit: LimitQuery = 50,
) -> MemoryPage:
    return await memories.list(tenant, user_id, memory_type, cursor, limit)


@router.get(
    "/{memory_id}",
    summary="One memory",
    response_model=MemoryOut,
    responses=problem_responses(MemoryNotFound),
)
async def get_memory(
    memory_id: uuid.UUID, user_id: UserIdQuery, tenant: TenantDep, memories: MemoryDep
) -> MemoryOut:
    return await memories.get(tenant, user_id, memory_id)


@router.patch(
    "/{memory_id}",
    summary="Change a memory (the old value stays in its history)",
    response_model=MemoryOut,
    responses=problem_responses(
        BadRequest,
        MemoryNotFound,
        EmbeddingRejected,
        ProviderUnavailable,
        ProviderTimeout,
        VectorStoreUnavailable,
    ),
)
async def patch_memory(
    memory_id: uuid.UUID, body: MemoryPatch, tenant: TenantDep, memories: MemoryDep
) -> MemoryOut:
    return await memories.update(tenant, memory_id, body)


@router.delete(
    "/{memory_id}",
    summary="Delete a memory (its history stays readable)",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=problem_responses(MemoryNotFound, VectorStoreUnavailable),
)
async def delete_memory(
    memory_id: uuid.UUID, user_id: UserIdQuery, tenant: TenantDep, memories: MemoryDep
) -> Response:
    await memories.delete(tenant, user_id, memory_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{memory_id}/restore",
    summary="Undo a forget within the grace period",
    description="The memory is live and searchable again, and counts as used now. `409` when "
    "it is not forgotten; `410` when its grace period is over (its content was purged).",
    response_model=MemoryOut,
    responses=problem_responses(MemoryNotFound, MemoryNotForgotten, MemoryPurged),
)
async def restore_memory(
    memory_id: uuid.UUID, user_id: UserIdQuery, tenant: TenantDep, forgetting: ForgettingDep
) -> MemoryOut:
    return memory_out(await forgetting.restore(tenant, user_id, memory_id))


@router.get(
    "/{memory_id}/history",
    summary="The memory's audit trail, oldest first",
    response_model=MemoryEventPage,
    responses=problem_responses(MemoryNotFound, InvalidCursor),
)
async def get_memory_history(
    memory_id: uuid.UUID,
    user_id: UserIdQuery,
    tenant: TenantDep,
    memories: MemoryDep,
    cursor: CursorQuery = None,
    limit: LimitQuery = 50,
) -> MemoryEventPage:
    return await memories.history(tenant, user_id, memory_id, cursor, limit)
