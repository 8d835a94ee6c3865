"""What erasing a session does to its memories (`app.core.erasure`): pure, no I/O."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.core.audit import AuditEvent
from app.core.erasure import Shrunk, plan_detach, plan_summaries

NOW = datetime(2025, 6, 1, tzinfo=UTC)


@dataclass
class Row:
    session_id: str | None
    sources: list[dict[str, Any]]
    deleted_at: datetime | None = None
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    tenant_id: str = "t"
    user_id: str = "u"


def src(session: str, seq: int) -> dict[str, Any]:
    return {"session_id": session, "message_id": f"seq:{seq}", "seq": seq}


def test_a_memory_sourced_only_from_the_session_is_erased() -> None:
    only = Row("gone", [src("gone", 1), src("gone", 2)])
    plan = plan_detach([only], "gone", NOW)
    assert (plan.erase, plan.shrink, plan.unfile, plan.events) == ([only.id], [], [], [])


def test_a_memory_also_sourced_elsewhere_loses_the_sessions_sources_with_an_event() -> None:
    shared = Row("gone", [src("gone", 1), src("kept", 7), src("other", 2)])
    plan = plan_detach([shared], "gone", NOW)
    remaining = [src("kept", 7), src("other", 2)]
    # It was filed under the erased session: now under the first that still sources it.
    assert plan.shrink == [Shrunk(shared.id, remaining, "kept")]
    assert (plan.erase, plan.unfile) == ([], [])
    assert plan.events == [
        AuditEvent(
            "t",
            "u",
            shared.id,
            "updated",
            old={"sources": shared.sources},
            new={"sources": remaining},
            reason="session gone deleted",
            at=NOW,
        )
    ]


def test_a_memory_filed_elsewhere_stays_filed_there() -> None:
    merged = Row("kept", [src("kept", 1), src("gone", 4)])
    plan = plan_detach([merged], "gone", NOW)
    assert plan.shrink == [Shrunk(merged.id, [src("kept", 1)], "kept")]


def test_a_memory_the_caller_wrote_under_the_session_stays_unfiled() -> None:
    written = Row("gone", [])
    plan = plan_detach([written], "gone", NOW)
    assert (plan.erase, plan.shrink, plan.unfile, plan.events) == ([], [], [written.id], [])


def test_soft_deleted_memories_of_the_session_are_erased_whatever_their_sources() -> None:
    """Their audit trail quotes the session's content."""
    written = Row("gone", [], deleted_at=NOW)
    shared = Row("gone", [src("gone", 1), src("kept", 2)], deleted_at=NOW)
    plan = plan_detach([written, shared], "gone", NOW)
    assert plan.erase == [written.id, shared.id]
    assert (plan.shrink, plan.unfile, plan.events) == ([], [], [])


def test_the_plan_keeps_the_order_of_the_rows_and_leaves_them_alone() -> None:
    rows = [Row("gone", [src("gone", i)]) for i in range(3)]
    before = [list(r.sources) for r in rows]
    assert plan_detach(rows, "gone", NOW).erase == [r.id for r in rows]
    assert [r.sources for r in rows] == before


@dataclass
class Sum:
    level: str
    sources: list[Any]
    id: uuid.UUID = field(default_factory=uuid.uuid4)


def cites(*children: Sum) -> list[dict[str, Any]]:
    return [{"id": str(c.id), "level": c.level, "period_start": "x"} for c in children]


def test_summaries_go_by_citation_up_the_levels() -> None:
    mixed = Sum("daily", [src("s", 1), src("other", 4)])
    only = Sum("daily", [src("s", 2)])
    clean = Sum("daily", [src("other", 5)])
    week = Sum("weekly", cites(mixed, clean))
    clean_week = Sum("weekly", cites(clean))
    essence = Sum("essence", cites(week, clean_week))
    rows = [essence, clean_week, week, clean, only, mixed]
    assert plan_summaries(rows, "s") == [essence, week, only, mixed]


def test_summaries_citing_only_others_stay() -> None:
    clean = Sum("daily", [src("other", 1)])
    week = Sum("weekly", cites(clean))
    essence = Sum("essence", cites(week))
    assert plan_summaries([clean, week, essence], "s") == []
    # An essence over a weekly that stays is not touched by a daily elsewhere going.
    doomed = Sum("daily", [src("s", 1)])
    assert plan_summaries([clean, week, essence, doomed], "s") == [doomed]
