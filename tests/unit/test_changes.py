"""`changes.statement_scopes` on the forms no store sends today but a new one might: they
must count for everyone (or for the right user), never for nobody."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from app.stores.changes import EVERYONE, statement_scopes
from app.stores.models import Memory, User

T, U = "t", "u"
MID = uuid.uuid4()


def test_an_equality_under_an_or_or_a_subquery_pins_no_user() -> None:
    either = (
        sa.update(Memory)
        .where(Memory.tenant_id == T, sa.or_(Memory.user_id == U, Memory.session_id == "s"))
        .values(content="x")
    )
    assert statement_scopes(either) == {EVERYONE}
    inner = sa.select(Memory.id).where(Memory.user_id == U).scalar_subquery()
    nested = sa.update(Memory).where(Memory.tenant_id == T, Memory.id == inner).values(content="x")
    assert statement_scopes(nested) == {EVERYONE}
    plain = (
        sa.update(Memory)
        .where(Memory.tenant_id == T, Memory.user_id == U, Memory.id == MID)
        .values(content="x")
    )
    assert statement_scopes(plain) == {(T, U)}


def test_an_upsert_counts_whatever_its_new_row_holds() -> None:
    row = {"id": MID, "tenant_id": T, "user_id": U, "memory_type": "episodic", "content": "x"}
    for dialect in (sqlite, postgresql):
        insert = dialect.insert(Memory).values(**row)
        assert statement_scopes(insert.on_conflict_do_nothing(index_elements=["id"])) == set()
        upsert = insert.on_conflict_do_update(index_elements=["id"], set_={"memory_type": "x"})
        assert statement_scopes(upsert) == {(T, U)}
        user = dialect.insert(User).values(tenant_id=T, id=U, profile={})
        assert statement_scopes(user.on_conflict_do_nothing()) == set()
        set_profile = user.on_conflict_do_update(
            index_elements=["tenant_id", "id"], set_={"profile": {"a": 1}}
        )
        assert statement_scopes(set_profile) == {(T, U)}


def test_moving_a_memory_to_another_user_counts_for_everyone() -> None:
    move = (
        sa.update(Memory)
        .where(Memory.tenant_id == T, Memory.user_id == U, Memory.id == MID)
        .values(user_id="v")
    )
    assert statement_scopes(move) == {EVERYONE}


def test_textual_writes_count_for_everyone_however_they_begin() -> None:
    assert statement_scopes(sa.text("/* fix */ UPDATE users SET profile = '{}'")) == {EVERYONE}
    assert statement_scopes(sa.text("WITH x AS (SELECT 1) DELETE FROM summaries")) == {EVERYONE}
    assert statement_scopes(sa.text("UPDATE jobs SET state = 'queued'")) == set()
    assert statement_scopes(sa.text("SELECT * FROM memories")) == set()


def test_columns_context_never_shows_count_for_nobody() -> None:
    counts = (
        sa.update(Memory)
        .where(Memory.id == sa.bindparam("p_id"))
        .values(access_count=sa.bindparam("p_count"))
    )
    assert statement_scopes(counts, [{"p_id": MID, "p_count": 3}]) == set()
    shown = sa.update(Memory).where(Memory.id == sa.bindparam("p_id")).values(importance=0.2)
    assert statement_scopes(shown, [{"p_id": MID}]) == {EVERYONE}
