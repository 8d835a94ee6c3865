"""Initial schema: tenants, keys, users, sessions, the message log, memories and their audit.

Revision ID: 2026_11_29_initial
Revises:
Create Date: 2026-11-29 23:07:14.542312
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "2026_11_29_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def TS() -> sa.types.TypeEngine[Any]:  # noqa: N802 - reads like a type
    return sa.DateTime(timezone=True)


def JSON() -> sa.types.TypeEngine[Any]:  # noqa: N802
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def BIGID() -> sa.types.TypeEngine[Any]:  # noqa: N802
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=True),
        sa.Column("memory_type", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("access_count", sa.Integer(), nullable=False),
        sa.Column("last_accessed_at", TS(), nullable=True),
        sa.Column("strength", sa.Float(), nullable=False),
        sa.Column("pinned", sa.Boolean(), nullable=False),
        sa.Column("valid_from", TS(), nullable=True),
        sa.Column("valid_to", TS(), nullable=True),
        sa.Column("superseded_by", sa.Uuid(), nullable=True),
        sa.Column("sources", JSON(), nullable=False),
        sa.Column("metadata", JSON(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", TS(), nullable=False),
        sa.Column("updated_at", TS(), nullable=False),
        sa.Column("deleted_at", TS(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memories")),
    )
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.create_index("ix_memories_session", ["tenant_id", "session_id"], unique=False)
        batch_op.create_index(
            "ix_memories_user_created", ["tenant_id", "user_id", "created_at"], unique=False
        )
        batch_op.create_index(
            "ix_memories_user_hash", ["tenant_id", "user_id", "content_hash"], unique=False
        )

    op.create_table(
        "memory_events",
        sa.Column("id", BIGID(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("memory_id", sa.Uuid(), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False),
        sa.Column("old_value", JSON(), nullable=True),
        sa.Column("new_value", JSON(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", TS(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_events")),
    )
    with op.batch_alter_table("memory_events", schema=None) as batch_op:
        batch_op.create_index(
            "ix_memory_events_memory", ["tenant_id", "memory_id", "id"], unique=False
        )

    op.create_table(
        "sessions",
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("system_prompt", sa.Text(), nullable=True),
        sa.Column("metadata", JSON(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("indexed_seq", sa.BigInteger(), nullable=False),
        sa.Column("lease_owner", sa.String(length=128), nullable=True),
        sa.Column("lease_expires_at", TS(), nullable=True),
        sa.Column("created_at", TS(), nullable=False),
        sa.Column("updated_at", TS(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_sessions")),
    )
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.create_index("ix_sessions_pending", ["last_seq", "indexed_seq"], unique=False)
        batch_op.create_index("ix_sessions_tenant_user", ["tenant_id", "user_id"], unique=False)

    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("created_at", TS(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
    )
    op.create_table(
        "users",
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("profile", JSON(), nullable=False),
        sa.Column("max_access_count", sa.Integer(), nullable=False),
        sa.Column("created_at", TS(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_users")),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", TS(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_api_keys_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_table(
        "messages",
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("client_id", sa.String(length=128), nullable=True),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("metadata", JSON(), nullable=False),
        sa.Column("created_at", TS(), nullable=False),
        sa.Column("received_at", TS(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "session_id"],
            ["sessions.tenant_id", "sessions.id"],
            name=op.f("fk_messages_tenant_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", "seq", name=op.f("pk_messages")),
        sa.UniqueConstraint(
            "tenant_id",
            "session_id",
            "client_id",
            name=op.f("uq_messages_tenant_id_session_id_client_id"),
        ),
    )


def downgrade() -> None:
    op.drop_table("messages")
    op.drop_table("api_keys")
    op.drop_table("users")
    op.drop_table("tenants")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_sessions_tenant_user")
        batch_op.drop_index("ix_sessions_pending")

    op.drop_table("sessions")
    with op.batch_alter_table("memory_events", schema=None) as batch_op:
        batch_op.drop_index("ix_memory_events_memory")

    op.drop_table("memory_events")
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.drop_index("ix_memories_user_hash")
        batch_op.drop_index("ix_memories_user_created")
        batch_op.drop_index("ix_memories_session")

    op.drop_table("memories")
