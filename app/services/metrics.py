"""The `/metrics` exposition: this process's (or every process's) measurements, and the
figures read at scrape time from the canonical store."""

from __future__ import annotations

from app.metrics import Metrics
from app.stores import metrics as metrics_store
from app.stores.db import Database


class MetricsService:
    def __init__(self, db: Database, metrics: Metrics) -> None:
        self.db = db
        self.metrics = metrics

    async def exposition(self) -> bytes:
        async with self.db.read() as tx:
            lag = await metrics_store.index_lag(tx)
            memories = await metrics_store.memories_by_type(tx)
        return self.metrics.render(lag, memories)
