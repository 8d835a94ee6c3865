"""The `/metrics` exposition: this process's (or every process's) measurements, and the
figures read at scrape time from the canonical store."""

from __future__ import annotations

import logging

from app.errors import DatabaseUnavailable
from app.metrics import IndexLag, MemoryCount, Metrics
from app.stores import metrics as metrics_store
from app.stores.db import Database

log = logging.getLogger("strata.metrics")


class MetricsService:
    def __init__(self, db: Database, metrics: Metrics) -> None:
        self.db = db
        self.metrics = metrics

    async def exposition(self) -> bytes:
        """With the database down the process's own figures still answer (an outage is when
        they are wanted most); the SQL-read gauges are left out and `strata_scrape_sql_up`
        says why."""
        lag: list[IndexLag] | None = None
        memories: list[MemoryCount] | None = None
        try:
            async with self.db.read() as tx:
                lag = await metrics_store.index_lag(tx)
                memories = await metrics_store.memories_by_type(tx)
        except DatabaseUnavailable as exc:
            log.warning("metrics without the SQL figures: %s", exc)
        return self.metrics.render(lag, memories)
