"""Jobs in the running app, in both modes: `GET /v1/jobs/{id}` shows a failed job with its
error and attempts, `POST /v1/jobs/{id}/rerun` runs it again, other tenants' jobs do not
exist; and the app's worker runs the periodic housekeeping job."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.jobs.registry import SYSTEM_TENANT, JobContext
from app.jobs.scheduler import period_start
from app.services.jobs import PURGE_FINISHED_JOBS, JobService
from app.stores.models import Job
from tests.conftest import Running
from tests.integration.test_jobs import make_runner


@pytest.fixture
def kind() -> str:
    return f"test.{uuid.uuid4().hex[:8]}"


async def test_job_api_failure_is_visible_and_rerunnable(running: Running, kind: str) -> None:
    service: JobService = running.state["services"].jobs
    job = await service.enqueue("default", kind, "k", {"x": 1}, max_attempts=2)
    failing = True

    async def flaky(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        if failing:
            raise ValueError(f"provider said no ({payload['x']})")
        return {"ok": True, "attempt": ctx.attempt}

    runner = make_runner(running.resources.db, {kind: flaky})
    for _ in range(200):
        body = (await running.client.get(f"/v1/jobs/{job.id}")).json()
        if body["state"] == "failed":
            break
        if await runner.run_once() is None:
            await asyncio.sleep(0.01)
    assert body["state"] == "failed", body
    assert body["attempts"] == body["max_attempts"] == 2
    assert body["last_error"] == "ValueError: provider said no (1)"
    assert body["result"] is None
    assert body["finished_at"] is not None

    rerun = await running.client.post(f"/v1/jobs/{job.id}/rerun")
    assert rerun.status_code == 202, rerun.text
    assert (rerun.json()["state"], rerun.json()["attempts"]) == ("queued", 0)
    failing = False
    assert await runner.run_once() == job.id
    body = (await running.client.get(f"/v1/jobs/{job.id}")).json()
    assert (body["state"], body["attempts"], body["result"]) == (
        "succeeded",
        1,
        {"ok": True, "attempt": 1},
    )
    assert body["key"] == "k"
    assert body["kind"] == kind

    again = await running.client.post(f"/v1/jobs/{job.id}/rerun")
    assert again.status_code == 409
    assert again.json()["code"] == "job_not_failed"


async def test_unknown_and_foreign_jobs_are_not_found(running: Running, kind: str) -> None:
    service: JobService = running.state["services"].jobs
    foreign = await service.enqueue("another-tenant", kind, "k", {})
    for job_id in (uuid.uuid4(), foreign.id):
        for resp in (
            await running.client.get(f"/v1/jobs/{job_id}"),
            await running.client.post(f"/v1/jobs/{job_id}/rerun"),
        ):
            assert resp.status_code == 404
            assert resp.json()["code"] == "job_not_found"
    bad = await running.client.get("/v1/jobs/not-a-uuid")
    assert bad.status_code == 422


async def test_the_worker_runs_todays_housekeeping_job(running: Running) -> None:
    today = period_start(datetime.now(UTC), timedelta(days=1))
    deadline = time.monotonic() + 30
    while True:
        async with running.resources.db.read() as tx:
            job = await tx.scalar(
                sa.select(Job).where(
                    Job.tenant_id == SYSTEM_TENANT,
                    Job.kind == PURGE_FINISHED_JOBS,
                    Job.key == f"{PURGE_FINISHED_JOBS}@{today.isoformat()}",
                )
            )
        if job is not None and job.state == "succeeded":
            break
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.1)
    assert job.due_at == today
    assert job.result is not None
    assert job.result["finished_before"] == (today - timedelta(days=7)).isoformat()
