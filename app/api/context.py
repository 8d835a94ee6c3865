"""Context assembly for one model call."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import READS, ContextDep, SessionIdPath, TenantDep
from app.api.errors import problem_responses
from app.errors import (
    BadRequest,
    EmbeddingRejected,
    ProviderTimeout,
    ProviderUnavailable,
    SessionNotFound,
    TokenBudgetTooSmall,
    VectorStoreUnavailable,
)
from app.schemas.context import ContextRequest, ContextResponse

router = APIRouter(prefix="/v1/sessions", tags=["context"])


@router.post(
    "/{session_id}/context",
    openapi_extra=READS,  # reads only: a read-scoped key may call it
    summary="The context that fits the token budget",
    description="System prompt, working memory (the scratchpad), the newest turns verbatim "
    "and the memories recalled for `query` (default: the last user message), packed so "
    "that `tokens.total <= token_budget`. The last user message is always included: "
    "verbatim when it fits, otherwise with its middle elided, reported in `truncated`. "
    "Only a system prompt that does not fit (with the bare minimum of that message) is a "
    "422 `token_budget_too_small`.",
    response_model=ContextResponse,
    responses=problem_responses(
        BadRequest,
        SessionNotFound,
        TokenBudgetTooSmall,
        EmbeddingRejected,
        ProviderUnavailable,
        ProviderTimeout,
        VectorStoreUnavailable,
    ),
)
async def get_context(
    session_id: SessionIdPath, body: ContextRequest, tenant: TenantDep, service: ContextDep
) -> ContextResponse:
    return await service.build(tenant, session_id, body)
