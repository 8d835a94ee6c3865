"""PostgreSQL learns that `user_id` depends on `tenant_id` (extended statistics).

Statements by row id also name their owner (`WHERE id = ANY(:ids) AND tenant_id = :t AND
user_id = :u`, docs/security.md). Without extended statistics the planner multiplies the
two columns' selectivities, underestimates how many rows one user has, and may read all of
an ordinary user's rows through `(tenant_id, user_id, …)` instead of a few primary-key
look-ups. With functional-dependency statistics it estimates the pair as the user alone and
keeps the primary key (measured: 75 heap rows → 3 blocks for 3 ids). SQLite has no such
statistics: its statements by id use the primary key already.

Revision ID: 2026_12_04_owner_statistics
Revises: 2026_12_03_fact_order
Create Date: 2026-12-04 09:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "2026_12_04_owner_statistics"
down_revision: str | None = "2026_12_03_fact_order"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("memories", "summaries")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(
            f"CREATE STATISTICS IF NOT EXISTS st_{table}_owner (dependencies) "
            f"ON tenant_id, user_id FROM {table}"
        )
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"DROP STATISTICS IF EXISTS st_{table}_owner")
