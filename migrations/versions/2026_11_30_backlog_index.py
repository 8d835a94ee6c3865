"""Backlog index: a partial index of the sessions whose log is ahead of their index.

`last_seq > indexed_seq` compares two columns, which a plain index on them cannot serve;
the partial index holds only the pending sessions, ordered as the worker claims them.

Revision ID: 2026_11_30_backlog_index
Revises: 2026_11_29_initial
Create Date: 2026-11-30 00:12:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "2026_11_30_backlog_index"
down_revision: str | None = "2026_11_29_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = sa.text("last_seq > indexed_seq")


def upgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_sessions_pending")
        batch_op.create_index(
            "ix_sessions_backlog",
            ["updated_at"],
            unique=False,
            postgresql_where=PENDING,
            sqlite_where=PENDING,
        )


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_sessions_backlog")
        batch_op.create_index("ix_sessions_pending", ["last_seq", "indexed_seq"], unique=False)
