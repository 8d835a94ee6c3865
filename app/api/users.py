"""A user's data as a whole: export it, erase it (docs/privacy.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from fastapi.responses import JSONResponse, StreamingResponse

from app.api.deps import ErasureDep, ExportDep, TenantDep, UserIdPath
from app.api.errors import problem_responses
from app.errors import UserNotFound
from app.schemas.users import ErasureReceipt, UserExport

router = APIRouter(prefix="/v1/users", tags=["users"])


@router.get(
    "/{user_id}/export",
    summary="Everything held about a user, as one JSON document (streamed)",
    description="Sessions with their whole logs, the Redis buffer, memories with their audit "
    "history (forgotten and deleted ones too), summaries and the jobs about the user, in "
    "the order `sections` lists. The document is written as it is read, in constant memory; "
    "it is not a snapshot of one instant.",
    response_class=StreamingResponse,
    responses={
        200: {"model": UserExport, "description": "the export document"},
        **problem_responses(UserNotFound),
    },
)
async def export_user(
    user_id: UserIdPath, tenant: TenantDep, export: ExportDep
) -> StreamingResponse:
    chunks = await export.open(tenant, user_id)
    return StreamingResponse(
        chunks,
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{user_id}.json"'},
    )


@router.delete(
    "/{user_id}",
    summary="Erase a user: every row, buffer key and index point, with a receipt",
    description="Starts (or finds) the user's erasure job. `200` with the receipt when it "
    "finished within the request; `202` with the job's id (`GET /v1/jobs/{job_id}`) and the "
    "counts so far otherwise, or at once with `wait=false`. Idempotent: a user of whom "
    "nothing is held is a `200` with zero counts. While it runs, writes for the user are "
    "refused (`409 user_erasure_in_progress`) and the export is a 404.",
    response_model=ErasureReceipt,
    responses={
        202: {"model": ErasureReceipt, "description": "the erasure runs on; follow `job_id`"},
        **problem_responses(),
    },
)
async def erase_user(
    user_id: UserIdPath,
    tenant: TenantDep,
    erasure: ErasureDep,
    wait: Annotated[
        bool, Query(description="wait (up to a server-set time) for the erasure to finish")
    ] = True,
) -> ErasureReceipt | JSONResponse:
    receipt = await erasure.request(tenant, user_id, wait=wait)
    if receipt.state != "succeeded":
        return JSONResponse(receipt.model_dump(mode="json"), status_code=status.HTTP_202_ACCEPTED)
    return receipt
