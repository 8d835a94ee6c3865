"""The user's facts by type in time order: `ix_memories_user_type` gains `created_at`.

SQLite (without ANALYZE statistics) answered "the user's newest facts" by walking every one
of the user's memories newest first (`ix_memories_user_created`) to find the few facts among
them: 119 ms per context call at 100k memories, none of them facts. With `created_at` in
the type index, one type's newest are read straight from it (0.08 ms).

Revision ID: 2026_12_03_fact_order
Revises: 2026_12_02_facts
Create Date: 2026-12-03 09:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "2026_12_03_fact_order"
down_revision: str | None = "2026_12_02_facts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.drop_index("ix_memories_user_type")
        batch_op.create_index(
            "ix_memories_user_type", ["tenant_id", "user_id", "memory_type", "created_at"]
        )


def downgrade() -> None:
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.drop_index("ix_memories_user_type")
        batch_op.create_index("ix_memories_user_type", ["tenant_id", "user_id", "memory_type"])
