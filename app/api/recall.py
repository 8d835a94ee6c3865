"""Recall: scored retrieval from long-term memory."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import READS, RecallDep, TenantDep
from app.api.errors import problem_responses
from app.errors import (
    BadRequest,
    EmbeddingRejected,
    ProviderTimeout,
    ProviderUnavailable,
    SessionNotFound,
    VectorStoreUnavailable,
)
from app.schemas.recall import RecallRequest, RecallResponse

router = APIRouter(prefix="/v1", tags=["recall"])


@router.post(
    "/recall",
    openapi_extra=READS,  # reads only: a read-scoped key may call it
    summary="Find the memories that matter for a query",
    description="Hybrid search (dense + BM25 terms, fused with RRF), then "
    "`score = α·semantic + β·recency + γ·importance`, each term in [0, 1].",
    response_model=RecallResponse,
    responses=problem_responses(
        BadRequest,
        SessionNotFound,
        EmbeddingRejected,
        ProviderUnavailable,
        ProviderTimeout,
        VectorStoreUnavailable,
    ),
)
async def recall(body: RecallRequest, tenant: TenantDep, service: RecallDep) -> RecallResponse:
    return await service.recall(tenant, body)
