"""Forgetting: a memory's tombstone (`forgotten_at`) and purge time, and each tenant's
forgetting policy (docs/forgetting.md).

Revision ID: 2026_12_02_forget
Revises: 2026_12_02_userdata
Create Date: 2026-12-02 09:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "2026_12_02_forget"
down_revision: str | None = "2026_12_02_userdata"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def TS() -> sa.types.TypeEngine[Any]:  # noqa: N802 - reads like a type
    return sa.DateTime(timezone=True)


def JSON() -> sa.types.TypeEngine[Any]:  # noqa: N802
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("memories") as batch:
        batch.add_column(sa.Column("forgotten_at", TS(), nullable=True))
        batch.add_column(sa.Column("purged_at", TS(), nullable=True))
    # The purge's scan: only forgotten, not yet purged memories are in it.
    op.create_index(
        "ix_memories_forgotten",
        "memories",
        ["forgotten_at"],
        postgresql_where=sa.text("forgotten_at IS NOT NULL AND purged_at IS NULL"),
        sqlite_where=sa.text("forgotten_at IS NOT NULL AND purged_at IS NULL"),
    )
    op.create_table(
        "forgetting_policies",
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("policy", JSON(), nullable=False),
        sa.Column("updated_at", TS(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_forgetting_policies")),
    )


def downgrade() -> None:
    op.drop_table("forgetting_policies")
    op.drop_index("ix_memories_forgotten", table_name="memories")
    with op.batch_alter_table("memories") as batch:
        batch.drop_column("purged_at")
        batch.drop_column("forgotten_at")
