"""Background jobs: their state, and a re-run of one that failed."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, status

from app.api.deps import JobDep, TenantDep
from app.api.errors import problem_responses
from app.errors import JobNotFailed, JobNotFound
from app.schemas.jobs import JobOut

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.get(
    "/{job_id}",
    summary="One job: its state, attempts, last error and result",
    response_model=JobOut,
    responses=problem_responses(JobNotFound),
)
async def get_job(job_id: uuid.UUID, tenant: TenantDep, jobs: JobDep) -> JobOut:
    return await jobs.get(tenant, job_id)


@router.post(
    "/{job_id}/rerun",
    summary="Queue a failed job again, with a fresh set of attempts",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses=problem_responses(JobNotFound, JobNotFailed),
)
async def rerun_job(job_id: uuid.UUID, tenant: TenantDep, jobs: JobDep) -> JobOut:
    return await jobs.rerun(tenant, job_id)
