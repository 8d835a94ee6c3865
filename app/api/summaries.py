"""Hierarchical summaries: ask for one, and list a user's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from fastapi.responses import JSONResponse

from app.api.deps import LimitQuery, SummaryDep, TenantDep, UserIdPath
from app.api.errors import problem_responses
from app.errors import BadRequest, InvalidCursor, PeriodNotStarted, UserErasureInProgress
from app.schemas.common import IsoDatetime, Text
from app.schemas.summaries import (
    SummarizeAccepted,
    SummarizeRequest,
    SummaryItem,
    SummaryLevel,
    SummaryPage,
)

router = APIRouter(prefix="/v1", tags=["summaries"])


@router.post(
    "/summarize",
    summary="Summarise a user's period: a job, or the summary when it is already current",
    description="`202` with the job that writes the summary (`GET /v1/jobs/{job_id}`), or "
    "`200` with the summary when its inputs have not changed since it was written.",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SummarizeAccepted,
    responses={
        200: {"model": SummaryItem, "description": "the summary, already current"},
        **problem_responses(BadRequest, PeriodNotStarted, UserErasureInProgress),
    },
)
async def summarize(
    body: SummarizeRequest, tenant: TenantDep, summaries: SummaryDep
) -> SummarizeAccepted | JSONResponse:
    outcome = await summaries.request(tenant, body.user_id, body.level, body.period_start)
    if isinstance(outcome, SummaryItem):
        return JSONResponse(outcome.model_dump(mode="json"), status_code=status.HTTP_200_OK)
    return outcome


@router.get(
    "/users/{user_id}/summaries",
    summary="A user's summaries, newest period first",
    response_model=SummaryPage,
    responses=problem_responses(InvalidCursor),
)
async def list_summaries(
    user_id: UserIdPath,
    tenant: TenantDep,
    summaries: SummaryDep,
    level: SummaryLevel | None = None,
    from_: Annotated[
        IsoDatetime | None, Query(alias="from", description="periods starting at or after")
    ] = None,
    to: Annotated[IsoDatetime | None, Query(description="periods starting at or before")] = None,
    limit: LimitQuery = 50,
    cursor: Annotated[str | None, Text(512), Query(description="from `next_cursor`")] = None,
) -> SummaryPage:
    return await summaries.page(
        tenant,
        user_id,
        level=level,
        start_from=from_,
        start_to=to,
        cursor=cursor,
        limit=limit,
    )
