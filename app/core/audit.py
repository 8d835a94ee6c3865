"""The audit trail's vocabulary: one shape for every event in a memory's history.

Promotion, the memories API and session erasure all describe a change the same way, so a
reader of `/v1/memories/{id}/history` sees one shape whatever wrote it.
"""

from __future__ import annotations

import uuid
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import Any, Literal

EventName = Literal[
    "created",
    "updated",
    "superseded",
    "confirmed",
    "reinforced",
    "forgotten",
    "deleted",
    "restored",
    "purged",
]


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One change to one memory: what it was (`old`), what it became (`new`), and why."""

    tenant_id: str
    user_id: str
    memory_id: uuid.UUID
    event: EventName
    _: KW_ONLY
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    reason: str | None
    at: datetime
