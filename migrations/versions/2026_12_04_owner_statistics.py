"""PostgreSQL learns that `user_id` depends on `tenant_id` (extended statistics).

Statements by row id also name their owner (`WHERE id = ANY(:ids) AND tenant_id = :t AND
user_id = :u`, docs/security.md). Without extended statistics the planner multiplies the
two columns' selectivities, underestimates how many rows one user has, and may read all of
an ordinary user's rows through `(tenant_id, user_id, …)` instead of a few primary-key
look-ups. With functional-dependency statistics it estimates the pair as the user alone and
keeps the primary key. Measured on a 190,000-row test table: 3 ids of a user with 75
rows read all 75 rows without the statistics, 3 heap blocks with them; on another
distribution (300,000 rows, ~1,500 per user) the planner chose the primary key anyway, so
this is cheap insurance, not a measured speed-up. SQLite has no such statistics: its
statements by id use the primary key already.

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
        # Recreated, not "IF NOT EXISTS": an object of that name with other kinds would
        # otherwise stay and the dependency statistics never exist.
        op.execute(f"DROP STATISTICS IF EXISTS st_{table}_owner")
        op.execute(
            f"CREATE STATISTICS st_{table}_owner (dependencies) ON tenant_id, user_id FROM {table}"
        )
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"DROP STATISTICS IF EXISTS st_{table}_owner")
