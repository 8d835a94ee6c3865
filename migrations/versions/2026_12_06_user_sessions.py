"""Sessions are the user's: keyed by (tenant, user, session id), so two users of one tenant
may use the same session id, each with a session of their own, and no answer tells one of
them whether the other holds an id (docs/security.md, "Sessions are the user's").

- `sessions`: primary key (tenant_id, user_id, id) (was (tenant_id, id)); the index
  (tenant_id, user_id) goes, the key covers it; `ids_by_user` says whether the session's
  memories' ids name its user (`app.stores.models.incarnation`): false for every session
  carried over, so their memories keep the ids they have and promoting their messages
  again names the same memories; true for sessions made from now on.
- `messages`: primary key (tenant_id, user_id, session_id, seq), client ids unique per
  (tenant_id, user_id, session_id), the foreign key to the session on all three. A message's
  `user_id` was always its session's; it is set from the session all the same.
- `memories`: the index on their session names the user too.

Downgrade refuses while two users of a tenant share a session id (the old key could not
hold both): delete or rename one of them first. Sessions made after the upgrade keep
`ids_by_user`'s ids only while it exists: after a downgrade, promoting their old messages
again would name new memories.

Revision ID: 2026_12_06_user_sessions
Revises: 2026_12_05_sweep_order
Create Date: 2026-12-06 09:00:00
"""

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.exc import SAWarning

revision: str = "2026_12_06_user_sessions"
down_revision: str | None = "2026_12_05_sweep_order"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
FK = "fk_messages_tenant_id_sessions"


def _primary_key(batch_op: Any, name: str, columns: list[str]) -> None:
    # PostgreSQL drops the old key first; SQLite's batch rebuilds the table with the new
    # one, and SQLAlchemy warns, as it does so, that the reflected key was another.
    if op.get_bind().dialect.name != "sqlite":
        batch_op.drop_constraint(name, type_="primary")
    batch_op.create_primary_key(name, columns)


@contextlib.contextmanager
def _rebuilt(table: str) -> Iterator[Any]:
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*specifies columns .* as primary_key=True", category=SAWarning
        )
        with op.batch_alter_table(table, naming_convention=NAMING) as batch_op:
            yield batch_op


def upgrade() -> None:
    op.execute(
        "UPDATE messages SET user_id = (SELECT sessions.user_id FROM sessions"
        " WHERE sessions.tenant_id = messages.tenant_id AND sessions.id = messages.session_id)"
        " WHERE user_id <> (SELECT sessions.user_id FROM sessions"
        " WHERE sessions.tenant_id = messages.tenant_id AND sessions.id = messages.session_id)"
    )
    with op.batch_alter_table("messages", naming_convention=NAMING) as batch_op:
        batch_op.drop_constraint(FK, type_="foreignkey")
    with _rebuilt("sessions") as batch_op:
        batch_op.drop_index("ix_sessions_tenant_user")
        batch_op.add_column(
            sa.Column("ids_by_user", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        _primary_key(batch_op, "pk_sessions", ["tenant_id", "user_id", "id"])
    with op.batch_alter_table("sessions", naming_convention=NAMING) as batch_op:
        batch_op.alter_column("ids_by_user", server_default=sa.true())
    with _rebuilt("messages") as batch_op:
        batch_op.drop_constraint("uq_messages_tenant_id_session_id_client_id", type_="unique")
        _primary_key(batch_op, "pk_messages", ["tenant_id", "user_id", "session_id", "seq"])
        batch_op.create_unique_constraint(
            "uq_messages_tenant_id_user_id_session_id_client_id",
            ["tenant_id", "user_id", "session_id", "client_id"],
        )
        batch_op.create_foreign_key(
            FK,
            "sessions",
            ["tenant_id", "user_id", "session_id"],
            ["tenant_id", "user_id", "id"],
            ondelete="CASCADE",
        )
    with op.batch_alter_table("memories", naming_convention=NAMING) as batch_op:
        batch_op.drop_index("ix_memories_session")
        batch_op.create_index("ix_memories_session", ["tenant_id", "user_id", "session_id"])


def downgrade() -> None:
    shared = op.get_bind().execute(
        sa.text(
            "SELECT count(*) FROM (SELECT tenant_id, id FROM sessions"
            " GROUP BY tenant_id, id HAVING count(*) > 1) AS shared"
        )
    )
    if (n := shared.scalar_one()) > 0:
        raise RuntimeError(
            f"cannot downgrade 2026_12_06_user_sessions: {n} session ids are used by more "
            "than one user of a tenant, which the older key (tenant_id, id) cannot hold; "
            "delete or rename those sessions first"
        )
    with op.batch_alter_table("memories", naming_convention=NAMING) as batch_op:
        batch_op.drop_index("ix_memories_session")
        batch_op.create_index("ix_memories_session", ["tenant_id", "session_id"])
    with _rebuilt("messages") as batch_op:
        batch_op.drop_constraint(FK, type_="foreignkey")
        batch_op.drop_constraint(
            "uq_messages_tenant_id_user_id_session_id_client_id", type_="unique"
        )
        _primary_key(batch_op, "pk_messages", ["tenant_id", "session_id", "seq"])
        batch_op.create_unique_constraint(
            "uq_messages_tenant_id_session_id_client_id", ["tenant_id", "session_id", "client_id"]
        )
    with _rebuilt("sessions") as batch_op:
        _primary_key(batch_op, "pk_sessions", ["tenant_id", "id"])
        batch_op.drop_column("ids_by_user")
        batch_op.create_index("ix_sessions_tenant_user", ["tenant_id", "user_id"])
    with op.batch_alter_table("messages", naming_convention=NAMING) as batch_op:
        batch_op.create_foreign_key(
            FK,
            "sessions",
            ["tenant_id", "session_id"],
            ["tenant_id", "id"],
            ondelete="CASCADE",
        )
