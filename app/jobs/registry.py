"""Which async handler runs each job kind, and which kinds run on a schedule.

A kind is declared beside its service (app/services/job_kinds.py); `declare` registers it,
so its stored payload is checked against its model before the handler runs. `add` takes a
bare handler over the stored dict (a test's). Handlers must be idempotent: a runner killed
mid-job leaves the job running until its lease expires, and then another runner runs it
again from the start (docs/jobs.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from app.services.job_kinds import SYSTEM_TENANT, JobContext, JobKind

__all__ = ["SYSTEM_TENANT", "Handler", "JobContext", "Registry", "Schedule"]

Handler = Callable[[JobContext, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Schedule:
    """Enqueue a job of `kind` once per `every`, keyed by the period it belongs to."""

    name: str
    every: timedelta
    kind: str
    payload: Mapping[str, Any] = field(default_factory=dict)


class Registry:
    def __init__(self, kinds: list[JobKind[Any]] | None = None) -> None:
        self.handlers: dict[str, Handler] = {}
        self.declared: dict[str, JobKind[Any]] = {}
        self.schedules: list[Schedule] = []
        for kind in kinds or []:
            self.declare(kind)

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds this registry can run: a runner claims only these, so a process that
        does not know a kind (an older release, say) leaves its jobs to one that does."""
        return frozenset(self.handlers)

    def declare(self, kind: JobKind[Any]) -> None:
        """Run jobs of `kind` (its payload checked first), and schedule it if periodic."""
        self.add(kind.name, kind.run)
        self.declared[kind.name] = kind
        if kind.every is not None:
            self.every(kind.every, kind.name)

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
