"""A data key per user (`user_keys`): the Qdrant server's payload text is sealed under it and
the erasure destroys it (docs/privacy.md, "What stays on disk").

Every user that exists now gets a key with `sealed_from_start` false: points written before
hold their text in the clear, so an erasure's receipt cannot say their text is unreadable.
Users made from now on get theirs, sealed from the start, on their first point.

Revision ID: 2026_12_07_user_keys
Revises: 2026_12_06_user_sessions
Create Date: 2026-12-07 09:00:00
"""

import os
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "2026_12_07_user_keys"
down_revision: str | None = "2026_12_06_user_sessions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 1000


def upgrade() -> None:
    keys = op.create_table(
        "user_keys",
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("key", sa.LargeBinary(), nullable=False),
        sa.Column("sealed_from_start", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "user_id", name="pk_user_keys"),
    )
    users = sa.table("users", sa.column("tenant_id"), sa.column("id"))
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    now = datetime.now(UTC)
    rows = bind.execute(sa.select(users.c.tenant_id, users.c.id)).fetchall()
    for start in range(0, len(rows), BATCH):
        batch = [
            {
                "tenant_id": tenant_id,
                "user_id": user_id,
                "key": os.urandom(32),
                "sealed_from_start": False,
                # As the models' UTCDateTime stores it: naive UTC on SQLite.
                "created_at": now.replace(tzinfo=None) if sqlite else now,
            }
            for tenant_id, user_id in rows[start : start + BATCH]
        ]
        op.bulk_insert(keys, batch)


def downgrade() -> None:
    op.drop_table("user_keys")
