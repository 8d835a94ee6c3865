"""Jobs: the durable job runner's table, leader leases, and per-session promotion backoff.

Revision ID: 2026_11_30_jobs
Revises: 2026_11_30_backlog_index
Create Date: 2026-11-30 09:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "2026_11_30_jobs"
down_revision: str | None = "2026_11_30_backlog_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def TS() -> sa.types.TypeEngine[Any]:  # noqa: N802 - reads like a type
    return sa.DateTime(timezone=True)


def JSON() -> sa.types.TypeEngine[Any]:  # noqa: N802
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


QUEUED = sa.text("state = 'queued'")
RUNNING = sa.text("state = 'running'")
SUCCEEDED = sa.text("state = 'succeeded'")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("payload", JSON(), nullable=False),
        sa.Column("due_at", TS(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(length=128), nullable=True),
        sa.Column("lease_expires_at", TS(), nullable=True),
        sa.Column("result", JSON(), nullable=True),
        sa.Column("created_at", TS(), nullable=False),
        sa.Column("updated_at", TS(), nullable=False),
        sa.Column("finished_at", TS(), nullable=True),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'succeeded', 'failed')", name=op.f("ck_jobs_state")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("tenant_id", "kind", "key", name=op.f("uq_jobs_tenant_id_kind_key")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_jobs_queued", ["due_at"], postgresql_where=QUEUED, sqlite_where=QUEUED
        )
        batch_op.create_index(
            "ix_jobs_running", ["lease_expires_at"], postgresql_where=RUNNING, sqlite_where=RUNNING
        )
        batch_op.create_index(
            "ix_jobs_succeeded",
            ["finished_at"],
            postgresql_where=SUCCEEDED,
            sqlite_where=SUCCEEDED,
        )

    op.create_table(
        "leader_leases",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("expires_at", TS(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leader_leases")),
    )

    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("promote_failures", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(sa.Column("promote_retry_at", TS(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("promote_retry_at")
        batch_op.drop_column("promote_failures")

    op.drop_table("leader_leases")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_succeeded")
        batch_op.drop_index("ix_jobs_running")
        batch_op.drop_index("ix_jobs_queued")

    op.drop_table("jobs")
