"""The `erase_user` job: removes everything held about one user (app/services/users.py).

Keyed by the user and the user row's creation time, so asking twice queues one job; the
handler resumes where a crashed run stopped and answers the receipt again once done."""

from __future__ import annotations

from typing import Any

from app.jobs.registry import JobContext, Registry
from app.services.users import ERASE_USER, ErasureService


def register(registry: Registry, erasure: ErasureService) -> None:
    async def erase_user(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        return await erasure.run(ctx.tenant_id, str(payload["user_id"]), ctx.job_id)

    registry.add(ERASE_USER, erase_user)
