"""An index on memories (tenant_id, id): the order the forgetting sweep pages in.

The sweep reads every live memory once a day, 500 at a time, from after the last key
(`(tenant_id, id) > (:t, :id) ORDER BY tenant_id, id`). With no index in that order, each
page sorted all of a tenant's memories again: a dry-run sweep of one user with 100,000
memories took 24 s of a core in the embedded mode (bench/README.md, "The forgetting sweep
at 100k"), beside the requests it shares the process with. With the index each page is
one seek.

Revision ID: 2026_12_05_sweep_order
Revises: 2026_12_04_owner_statistics
Create Date: 2026-12-05 09:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "2026_12_05_sweep_order"
down_revision: str | None = "2026_12_04_owner_statistics"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_memories_tenant_id", "memories", ["tenant_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_memories_tenant_id", table_name="memories")
