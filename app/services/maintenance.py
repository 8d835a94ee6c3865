"""Maintenance on request (`POST /v1/admin/maintenance`): one job per request, run by the
job runner like any other (app/jobs/forgetting.py), so its progress and result are read at
`GET /v1/jobs/{id}`."""

from __future__ import annotations

import uuid

from app.schemas.forgetting import MaintenanceRequest
from app.schemas.jobs import JobOut
from app.services.jobs import JobService

MAINTENANCE = "maintenance"  # the job kind; its handler is app/jobs/forgetting.py's


class MaintenanceService:
    def __init__(self, jobs: JobService) -> None:
        self.jobs = jobs

    async def request(self, tenant_id: str, body: MaintenanceRequest) -> JobOut:
        # A fresh key: two requests are two runs (each task is idempotent in itself).
        return await self.jobs.enqueue(
            tenant_id,
            MAINTENANCE,
            f"{body.task}:{uuid.uuid4()}",
            {"task": body.task, "user_id": body.user_id, "dry_run": body.dry_run},
        )
