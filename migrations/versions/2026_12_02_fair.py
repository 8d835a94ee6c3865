"""Fair promotion and the worker's heartbeat.

`promoted_at` on sessions and users is when promotion last took a slice of them: the
worker claims the least recently served first, so a large backlog is worked off in turns
with everyone else's. `worker_heartbeats` is written by each running worker; `/readyz`
reads it beside the index lag.

Revision ID: 2026_12_02_fair
Revises: 2026_12_02_keys
Create Date: 2026-12-02 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "2026_12_02_fair"
down_revision: str | None = "2026_12_02_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "worker_heartbeats",
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("beat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_worker_heartbeats")),
    )
    op.create_index(op.f("ix_worker_heartbeats_beat_at"), "worker_heartbeats", ["beat_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_worker_heartbeats_beat_at"), table_name="worker_heartbeats")
    op.drop_table("worker_heartbeats")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("promoted_at")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("promoted_at")
