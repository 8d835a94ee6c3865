"""Administration of the caller's tenant: its forgetting policy, and maintenance tasks."""

from __future__ import annotations

from fastapi import APIRouter, status

from app.api.deps import ForgettingDep, MaintenanceDep, TenantDep
from app.api.errors import problem_responses
from app.errors import BadRequest
from app.schemas.forgetting import (
    ForgettingPolicyOut,
    ForgettingPolicyPatch,
    MaintenanceRequest,
)
from app.schemas.jobs import JobOut

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.get(
    "/forgetting",
    summary="The tenant's forgetting policy (defaults where it set nothing)",
    response_model=ForgettingPolicyOut,
    responses=problem_responses(),
)
async def get_forgetting(tenant: TenantDep, forgetting: ForgettingDep) -> ForgettingPolicyOut:
    policy = await forgetting.policy(tenant)
    return ForgettingPolicyOut.model_validate(policy.as_dict())


@router.patch(
    "/forgetting",
    summary="Change the tenant's forgetting thresholds",
    description="Only the fields given change; the others keep following the defaults. "
    "A field given as `null` follows the default again.",
    response_model=ForgettingPolicyOut,
    responses=problem_responses(BadRequest),
)
async def patch_forgetting(
    body: ForgettingPolicyPatch, tenant: TenantDep, forgetting: ForgettingDep
) -> ForgettingPolicyOut:
    policy = await forgetting.patch_policy(tenant, body.model_dump(exclude_unset=True))
    return ForgettingPolicyOut.model_validate(policy.as_dict())


@router.post(
    "/maintenance",
    summary="Run a maintenance task on the job runner",
    description="`promote` (the log's backlog into memories), `summarize` (periods that "
    "closed or changed), `forget` (the forgetting sweep, with the tenant's thresholds even "
    "when its periodic sweep is disabled), `reindex` (index points rebuilt from SQL). "
    "`user_id` narrows forget and reindex to one user; `dry_run` reports without changing "
    "anything. The job's result (`GET /v1/jobs/{id}`) is the report.",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses=problem_responses(BadRequest),
)
async def run_maintenance(
    body: MaintenanceRequest, tenant: TenantDep, maintenance: MaintenanceDep
) -> JobOut:
    return await maintenance.request(tenant, body)
