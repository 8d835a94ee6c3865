"""API keys: a name, scopes, an optional bound user, an optional rate limit of their own,
and revocation (docs/security.md).

Revision ID: 2026_12_02_keys
Revises: 2026_12_01_summaries
Create Date: 2026-12-02 09:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "2026_12_02_keys"
down_revision: str | None = "2026_12_01_summaries"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def TS() -> sa.types.TypeEngine[Any]:  # noqa: N802 - reads like a type
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("name", sa.String(length=128), server_default="", nullable=False)
        )
        batch_op.add_column(
            sa.Column("scopes", sa.String(length=64), server_default="read", nullable=False)
        )
        batch_op.add_column(sa.Column("user_id", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("rate_limit_per_second", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("rate_limit_burst", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("revoked_at", TS(), nullable=True))
        batch_op.create_index("ix_api_keys_tenant", ["tenant_id", "created_at"])


def downgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_api_keys_tenant")
        batch_op.drop_column("revoked_at")
        batch_op.drop_column("rate_limit_burst")
        batch_op.drop_column("rate_limit_per_second")
        batch_op.drop_column("user_id")
        batch_op.drop_column("scopes")
        batch_op.drop_column("name")
