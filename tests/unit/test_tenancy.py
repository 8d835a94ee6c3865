"""The tenant-scoping check itself (tests/tenancy.py): it sees a missing `tenant_id`, and
accepts the ways a scoped statement is written."""

from __future__ import annotations

import pytest

from tests import tenancy


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT memories.id FROM memories WHERE memories.id = $1",
        "SELECT memories.id FROM memories WHERE memories.user_id = ? AND memories.id = ?",
        "UPDATE memories SET content=$1 WHERE memories.id = $2",
        "DELETE FROM memory_events WHERE memory_events.memory_id IN ($1, $2)",
        "SELECT count(*) FROM sessions",
        "SELECT m.id FROM messages AS m JOIN sessions ON sessions.tenant_id = $1 WHERE m.seq > 1",
        # A condition on another table's tenant_id does not scope this one.
        "SELECT memories.id FROM memories WHERE memories.user_id IN "
        "(SELECT sessions.user_id FROM sessions WHERE sessions.tenant_id = $1)",
    ],
)
def test_an_unscoped_statement_is_seen(sql: str) -> None:
    assert tenancy.unscoped_tables(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT memories.id FROM memories WHERE memories.tenant_id = $1 AND memories.id = $2",
        "SELECT memories_1.id FROM memories AS memories_1 WHERE memories_1.tenant_id = ?",
        "UPDATE memories SET content=$1 WHERE memories.tenant_id = $2 AND memories.id = $3",
        "DELETE FROM summaries WHERE summaries.tenant_id IN ($1) AND summaries.id = $2",
        "SELECT messages.seq FROM messages JOIN sessions ON sessions.tenant_id = "
        "messages.tenant_id AND sessions.id = messages.session_id "
        "WHERE sessions.tenant_id = $1",
        'SELECT "memories".id FROM "memories" WHERE "memories"."tenant_id" = $1',
        "INSERT INTO memories (id, tenant_id) VALUES ($1, $2)",
        "SELECT 1",
        "SELECT leader_leases.owner FROM leader_leases WHERE leader_leases.name = $1",
        "SELECT tenants.id FROM tenants WHERE tenants.id = $1",
    ],
)
def test_scoped_or_tenantless_statements_pass(sql: str) -> None:
    assert tenancy.unscoped_tables(sql) == []


def test_an_unlisted_sender_is_a_violation_and_a_listed_one_is_not() -> None:
    sql = "SELECT memories.id FROM memories WHERE memories.id = $1"
    # Sent from test code: not the app's, not checked.
    assert tenancy.check(sql) is None
    # Sent from app code: the frame walk names the sender.
    found = _send_from_app(sql)
    assert found is not None
    assert found.sender == "app.fake_store.get"
    assert found.tables == ("memories",)
    tenancy.CROSS_TENANT["app.fake_store.get"] = "a test"
    try:
        assert _send_from_app(sql) is None
    finally:
        del tenancy.CROSS_TENANT["app.fake_store.get"]


def _send_from_app(sql: str) -> tenancy.Violation | None:
    """`tenancy.check` called from a function whose module claims to be app code."""
    namespace = {"__name__": "app.fake_store", "check": tenancy.check}
    exec("def get(sql):\n    return check(sql)\n", namespace)  # a fake sender
    result: tenancy.Violation | None = namespace["get"](sql)  # type: ignore[operator]
    return result
