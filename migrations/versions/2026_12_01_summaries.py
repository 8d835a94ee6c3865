"""Summaries: a user's daily, weekly and essence summaries, and the message indexes that
find a user's day across sessions and what arrived lately.

Revision ID: 2026_12_01_summaries
Revises: 2026_11_30_jobs
Create Date: 2026-12-01 09:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "2026_12_01_summaries"
down_revision: str | None = "2026_11_30_jobs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def TS() -> sa.types.TypeEngine[Any]:  # noqa: N802 - reads like a type
    return sa.DateTime(timezone=True)


def JSON() -> sa.types.TypeEngine[Any]:  # noqa: N802
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "summaries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("level", sa.String(length=16), nullable=False),
        sa.Column("period_start", TS(), nullable=False),
        sa.Column("period_end", TS(), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("sources", JSON(), nullable=False),
        sa.Column("source_hash", sa.String(length=64), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column("llm_usage", JSON(), nullable=True),
        sa.Column("created_at", TS(), nullable=False),
        sa.Column("updated_at", TS(), nullable=False),
        sa.CheckConstraint(
            "level IN ('daily', 'weekly', 'essence')", name=op.f("ck_summaries_level")
        ),
        sa.CheckConstraint("method IN ('extractive', 'llm')", name=op.f("ck_summaries_method")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_summaries")),
        sa.UniqueConstraint(
            "tenant_id",
            "user_id",
            "level",
            "period_start",
            name=op.f("uq_summaries_tenant_id_user_id_level_period_start"),
        ),
    )
    with op.batch_alter_table("summaries", schema=None) as batch_op:
        batch_op.create_index("ix_summaries_level_period", ["level", "period_start"])
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.create_index("ix_messages_user_created", ["tenant_id", "user_id", "created_at"])
        batch_op.create_index("ix_messages_received", ["received_at"])


def downgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index("ix_messages_received")
        batch_op.drop_index("ix_messages_user_created")
    with op.batch_alter_table("summaries", schema=None) as batch_op:
        batch_op.drop_index("ix_summaries_level_period")
    op.drop_table("summaries")
