"""`python -m app.migrate`: bring the schema to the newest revision, once, before starting
many processes (api replicas, workers) with `STRATA_AUTO_MIGRATE=false` (docs/scaling.md).

Reads the same settings as the service (`STRATA_DATABASE_URL`, or the embedded SQLite file
under `STRATA_DATA_DIR`). Exit status 0 once the schema is at the revision asked for.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from app import logs
from app.settings import Settings
from app.stores.db import migrate

log = logging.getLogger("strata.migrate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.migrate", description=__doc__)
    parser.add_argument(
        "revision", nargs="?", default="head", help="the revision to upgrade to (default: head)"
    )
    args = parser.parse_args(argv)
    settings = Settings()
    logs.configure(settings.log_level, settings.log_format)
    asyncio.run(migrate(settings.database_dsn, args.revision))
    log.info("schema migrated to %s", args.revision)
    return 0


if __name__ == "__main__":
    sys.exit(main())
