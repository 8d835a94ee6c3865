"""`HEAD_REVISION` names Alembic's newest migration: `migrate` trusts it to skip Alembic on a
database that is already there, so a migration added without updating it would never run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.script import ScriptDirectory

from app.stores.db import HEAD_REVISION, alembic_config

ROOT = Path(__file__).resolve().parents[2]


def test_head_revision_is_alembics_head() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite+aiosqlite:///unused.db"))
    assert script.get_heads() == [HEAD_REVISION]


def test_a_database_at_the_head_is_left_without_importing_alembic(tmp_path: Path) -> None:
    """The first start migrates; the next only reads the recorded revision."""
    dsn = f"sqlite+aiosqlite:///{tmp_path}/strata.db"
    code = (
        "import asyncio, sys\n"
        "from app.stores.db import current_revisions, migrate\n"
        f"dsn = {dsn!r}\n"
        "before = asyncio.run(current_revisions(dsn))\n"
        "asyncio.run(migrate(dsn))\n"
        "print(before, asyncio.run(current_revisions(dsn)), 'alembic' in sys.modules)\n"
    )

    def run() -> str:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run() == f"[] ['{HEAD_REVISION}'] True"  # a new database: Alembic migrates it
    assert run() == f"['{HEAD_REVISION}'] ['{HEAD_REVISION}'] False"  # at the head: left
