"""How a job kind is declared: its name, the pydantic model of its payload, its handler.

Each kind is declared once, beside the service that does its work (`ErasureService.job`,
`SummaryService.jobs`, ...); app/jobs/catalog.py lists the declarations a process runs, and
the registry (app/jobs/registry.py) checks a stored payload against the model before the
handler sees it. An enqueuing site builds the model and stores
`payload.model_dump(mode="json")`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError, field_serializer

# Owner of work that belongs to no tenant (housekeeping). Not reachable through the API,
# whose callers are always a real tenant.
SYSTEM_TENANT = "_system"

P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a handler knows of the run it is in."""

    job_id: uuid.UUID
    tenant_id: str
    kind: str
    key: str
    attempt: int  # 1 on the first run; a takeover after a crash counts as a new attempt
    max_attempts: int


class InvalidPayload(ValueError):
    """A stored payload that its kind's model refuses: the job fails for good (a retry
    reads the same row), and the runner goes on with the next."""


class Periodic(BaseModel):
    """The payload of a scheduled job: the start of its period (app/jobs/scheduler.py)."""

    period: datetime

    @field_serializer("period")
    def _iso(self, period: datetime) -> str:
        return period.isoformat()  # as the scheduler writes it: "+00:00", not "Z"


@dataclass(frozen=True, slots=True)
class JobKind(Generic[P]):
    """One kind of job. `handler` must be idempotent: a runner killed mid-job leaves the
    job to another, which runs it again from the start (docs/jobs.md). With `every`, the
    scheduler enqueues one job per period, whose payload is `Periodic`."""

    name: str
    payload: type[P]
    handler: Callable[[JobContext, P], Awaitable[dict[str, Any]]]
    every: timedelta | None = None

    def load(self, stored: dict[str, Any]) -> P:
        """The stored payload as the model, or `InvalidPayload` saying what is wrong."""
        try:
            return self.payload.model_validate(stored)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '(payload)'}: {e['msg']}" for e in exc.errors()
            )
            raise InvalidPayload(
                f"the payload of a {self.name!r} job is not a {self.payload.__name__}: {problems}"
            ) from None

    async def run(self, ctx: JobContext, stored: dict[str, Any]) -> dict[str, Any]:
        return await self.handler(ctx, self.load(stored))
