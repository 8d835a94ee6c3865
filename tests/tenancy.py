"""The tenant-scoping check (docs/security.md): every SELECT, UPDATE and DELETE the app sends
to a table that has a `tenant_id` column must constrain that column, unless the function
that sends it is listed in `CROSS_TENANT` with the reason it crosses tenants on purpose.

`tests/conftest.py` installs `record` on every engine for the whole run and fails a test in
whose time an unscoped statement was sent; `tests/unit/test_tenancy.py` shows the check
catches one. The statement is told apart by its text (the SQL as the driver receives it)
and its sender by the first frame of `app.` code on the stack, found across the greenlet
boundary of SQLAlchemy's asyncio layer.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

import greenlet  # type: ignore[import-untyped]  # no stubs; two attributes used

from app.stores.models import Base

TENANT_TABLES = frozenset(t.name for t in Base.metadata.sorted_tables if "tenant_id" in t.c)

CROSS_TENANT: dict[str, str] = {
    # Forgetting: the nightly sweep walks every tenant's memories under one leader lease.
    "app.stores.forgetting.sweep_page": "the forgetting sweep pages through all tenants",
    "app.stores.forgetting.due_for_purge": "the purge sweep pages through all tenants",
    # Readiness and metrics: an operator's figure over the whole service.
    "app.stores.sessions.index_lag": "/readyz reports the service's index lag",
    # Keys: the gate finds a key by its id before it knows whose it is.
    "app.stores.keys.find": "the gate looks a key up by id, before it knows the tenant",
    "app.stores.keys.count_active": "start-up: does any tenant have a key",
    "app.stores.keys.page": "the operator lists every tenant's keys (a tenant passes its own)",
    "app.stores.keys.revoke": "the operator revokes any tenant's key (a tenant passes its own)",
    # Background work: the worker and the job runner serve every tenant.
    "app.stores.jobs.any_due": "a job runner looks for due jobs of any tenant",
    "app.stores.jobs.claim": "a job runner claims due jobs of any tenant",
    "app.stores.jobs.renew": "a runner renews the lease of a job it claimed (by id and owner)",
    "app.stores.jobs.finish": "a runner records the outcome of a job it claimed",
    "app.stores.jobs.fail": "a runner records the failure of a job it claimed",
    "app.stores.jobs.requeue": "a runner puts back a job it claimed",
    "app.stores.jobs.purge_succeeded": "housekeeping purges old jobs of every tenant",
    "app.stores.sessions.claim_backlog": "the promotion worker leases backlog of any tenant",
    "app.stores.sessions.backlog_exists": "the promotion worker: is there work anywhere",
    "app.stores.memories.any_live": "reindex at start: is the SQL store empty",
    "app.stores.memories.uses": "the embedded index reads every memory's use at open",
    "app.stores.memories.live_page": "reindex walks every live memory of every tenant",
    "app.stores.summaries.recent_of_level": "the hourly sweep looks at every tenant's periods",
    "app.stores.summaries.users_received_between": "the hourly sweep finds users with news",
    # Operations: /metrics reports per tenant (grouped by tenant_id), never per user.
    "app.stores.metrics.index_lag": "index lag per tenant, for /metrics",
    "app.stores.metrics.memories_by_type": "memories per tenant and type, for /metrics",
}
"""Senders that cross tenants on purpose: background work, and the gate itself."""


@dataclass(frozen=True, slots=True)
class Violation:
    sender: str
    tables: tuple[str, ...]
    sql: str

    def __str__(self) -> str:
        return f"{self.sender} sends an unscoped query on {', '.join(self.tables)}: {self.sql}"


_REF = re.compile(r'\b(?:FROM|JOIN|UPDATE)\s+"?([a-z_]+)"?(?:\s+AS\s+"?([a-z_0-9]+)"?)?', re.I)
_HEADS = frozenset({"SELECT", "UPDATE", "DELETE", "WITH"})


def unscoped_tables(sql: str) -> list[str]:
    """The tenant tables `sql` reads or changes without a `tenant_id` condition after them
    (`x.tenant_id = ...`, `... = x.tenant_id`, `x.tenant_id IN (...)`)."""
    text = " ".join(sql.split())
    head = text.lstrip("( ").split(" ", 1)[0].upper()
    if head not in _HEADS:
        return []
    missing = []
    for ref in _REF.finditer(text):
        table, alias = ref.group(1), ref.group(2)
        if table not in TENANT_TABLES:
            continue
        name = re.escape(alias or table)
        column = rf'(?:(?<![\w."]){name}\.|(?<![\w."])"?{name}"?\.|(?<![\w.]))"?tenant_id"?'
        rest = text[ref.end() :]
        if not re.search(rf"{column}\s*(?:=|IN\b)|=\s*{column}", rest, re.I):
            missing.append(table)
    return missing


def sender() -> str | None:
    """`module.function` of the innermost frame of our code (not the db module), across the
    greenlets SQLAlchemy's asyncio layer runs statements in; None for SQL that is not the
    app's (migrations, a test's own)."""
    current = greenlet.getcurrent()
    glet: Any = current
    while glet is not None:
        frame: FrameType | None = sys._getframe(1) if glet is current else glet.gr_frame
        while frame is not None:
            module = str(frame.f_globals.get("__name__", ""))
            if module.startswith("app.") and module != "app.stores.db":
                return f"{module}.{frame.f_code.co_name}"
            frame = frame.f_back
        glet = glet.parent
    return None


def check(sql: str) -> Violation | None:
    tables = unscoped_tables(sql)
    if not tables:
        return None
    who = sender()
    if who is None or who in CROSS_TENANT:
        return None
    return Violation(who, tuple(tables), " ".join(sql.split())[:400])


violations: list[Violation] = []


def record(
    _conn: Any, _cursor: Any, statement: str, _params: Any, _context: Any, _many: bool
) -> None:
    """A `before_cursor_execute` listener: notes each unscoped statement."""
    found = check(statement)
    if found is not None:
        violations.append(found)
