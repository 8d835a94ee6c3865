"""Knowledge graph: a user's entities and the relations between them, bi-temporal (when a
relation held: `valid_from`/`valid_to`; when Strata learned and retracted it:
`learned_at`/`retracted_at`), and the index that finds a user's current facts.

Revision ID: 2026_12_02_facts
Revises: 2026_12_02_forget
Create Date: 2026-12-02 09:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "2026_12_02_facts"
down_revision: str | None = "2026_12_02_forget"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def TS() -> sa.types.TypeEngine[Any]:  # noqa: N802 - reads like a type
    return sa.DateTime(timezone=True)


def JSON() -> sa.types.TypeEngine[Any]:  # noqa: N802
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "entities",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("name_key", sa.String(length=256), nullable=False),
        sa.Column("entity_type", sa.String(length=64), nullable=True),
        sa.Column("learned_at", TS(), nullable=False),
        sa.Column("updated_at", TS(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_entities")),
        sa.UniqueConstraint(
            "tenant_id", "user_id", "name_key", name=op.f("uq_entities_tenant_id_user_id_name_key")
        ),
    )
    op.create_table(
        "relations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=128), nullable=False),
        sa.Column("subject_id", sa.Uuid(), nullable=False),
        sa.Column("predicate", sa.String(length=128), nullable=False),
        sa.Column("object_id", sa.Uuid(), nullable=False),
        sa.Column("valid_from", TS(), nullable=True),
        sa.Column("valid_to", TS(), nullable=True),
        sa.Column("learned_at", TS(), nullable=False),
        sa.Column("retracted_at", TS(), nullable=True),
        sa.Column("memory_id", sa.Uuid(), nullable=True),
        sa.Column("sources", JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["subject_id"],
            ["entities.id"],
            name=op.f("fk_relations_subject_id_entities"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["object_id"],
            ["entities.id"],
            name=op.f("fk_relations_object_id_entities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relations")),
    )
    with op.batch_alter_table("relations", schema=None) as batch_op:
        batch_op.create_index("ix_relations_subject", ["tenant_id", "user_id", "subject_id"])
        batch_op.create_index("ix_relations_object", ["tenant_id", "user_id", "object_id"])
        batch_op.create_index("ix_relations_memory", ["tenant_id", "memory_id"])
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.create_index("ix_memories_user_type", ["tenant_id", "user_id", "memory_type"])


def downgrade() -> None:
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.drop_index("ix_memories_user_type")
    with op.batch_alter_table("relations", schema=None) as batch_op:
        batch_op.drop_index("ix_relations_memory")
        batch_op.drop_index("ix_relations_object")
        batch_op.drop_index("ix_relations_subject")
    op.drop_table("relations")
    op.drop_table("entities")
