"""Which async handler runs each job kind, and which kinds run on a schedule.

A handler is a plain async function `(ctx, payload) -> result`. It must be idempotent: a
runner killed mid-job leaves the job running until its lease expires, and then another
runner runs it again from the start (docs/jobs.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

# Owner of work that belongs to no tenant (housekeeping). Not reachable through the API,
# whose callers are always a real tenant.
SYSTEM_TENANT = "_system"


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a handler knows of the run it is in."""

    job_id: uuid.UUID
    tenant_id: str
    kind: str
    key: str
    attempt: int  # 1 on the first run; a takeover after a crash counts as a new attempt
    max_attempts: int


Handler = Callable[[JobContext, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Schedule:
    """Enqueue a job of `kind` once per `every`, keyed by the period it belongs to."""

    name: str
    every: timedelta
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)


class Registry:
    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.schedules: list[Schedule] = []

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds this registry can run: a runner claims only these, so a process that
        does not know a kind (an older release, say) leaves its jobs to one that does."""
        return frozenset(self.handlers)

    def add(self, kind: str, handler: Handler) -> None:
        if kind in self.handlers:
            raise ValueError(f"job kind {kind!r} is registered twice")
        self.handlers[kind] = handler

    def every(
        self,
        every: timedelta,
        kind: str,
        *,
        name: str | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> None:
        if kind not in self.handlers:
            raise ValueError(f"schedule of unknown job kind {kind!r}")
        if every <= timedelta(0):
            raise ValueError("a schedule's interval must be positive")
        name = name or kind
        if any(s.name == name for s in self.schedules):
            raise ValueError(f"schedule {name!r} is registered twice")
        self.schedules.append(Schedule(name, every, kind, dict(payload or {})))
