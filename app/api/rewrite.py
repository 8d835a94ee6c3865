"""Query rewriting: a follow-up made standalone from the session's last turns."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import READS, RewriteDep, TenantDep
from app.api.errors import problem_responses
from app.errors import BadRequest, SessionNotFound
from app.schemas.rewrite import RewriteRequest, RewriteResponse

router = APIRouter(prefix="/v1", tags=["rewrite"])


@router.post(
    "/rewrite",
    openapi_extra=READS,  # reads only: a read-scoped key may call it
    summary="Make a follow-up question standalone",
    description="A query that leans on the conversation (a pronoun, a demonstrative, an "
    'ellipsis such as 「那摔伤算吗？」 or "what about her?") is rewritten from the session\'s '
    "last turns: by the LLM when one is configured (validated; any failure falls back), "
    "otherwise by a Chinese and English heuristic. A self-contained query comes back "
    "unchanged with `changed: false`.",
    response_model=RewriteResponse,
    responses=problem_responses(BadRequest, SessionNotFound),
)
async def rewrite(body: RewriteRequest, tenant: TenantDep, service: RewriteDep) -> RewriteResponse:
    return await service.rewrite(tenant, body)
