"""Prometheus metrics: what one process measures, and the text a scrape of `/metrics` reads.

One `Metrics` per process (opened with the other clients in `app.resources`), on a registry of
its own, so that two apps in one process (the tests) never share counts. With several api
processes (`uvicorn --workers`, gunicorn) set `PROMETHEUS_MULTIPROC_DIR` (the library's own
variable, read when it is imported) to an empty directory shared by every process, the worker
included: each process then writes its values to files there and a scrape of any one process
adds them all up (docs/scaling.md).

What costs a query (index lag, memories by type) is read at scrape time, by the process that
answers, and never kept between scrapes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.providers.embeddings import Embedder

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Request latency, seconds: the service levels (bench/README.md) lie between 5 ms (ingest
# p50) and 60 ms (context p99), so the buckets are dense there.
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.06, 0.08,
    0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
BATCH_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)

# Requests that matched no route share one label, and so do unknown methods: a scan of
# random paths or verbs must not mint a series per path or verb.
UNMATCHED = "<unmatched>"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class IndexLag:
    tenant_id: str
    sessions: int  # sessions with messages not yet indexed
    messages: int  # messages accepted (in the log) and not yet indexed


@dataclass(frozen=True, slots=True)
class MemoryCount:
    tenant_id: str
    memory_type: str
    count: int


class Metrics:
    def __init__(self, multiprocess_dir: Path | None = None) -> None:
        if multiprocess_dir is not None and values.ValueClass is values.MutexValue:
            # The library chose in-memory values at import: this process's counts would be
            # missing from every scrape, and it would read the others' stale files.
            raise RuntimeError(
                "PROMETHEUS_MULTIPROC_DIR must be in the environment before the process starts"
            )
        self.multiprocess_dir = multiprocess_dir
        self._request_children: dict[tuple[str, str, int], Any] = {}
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Histogram(
            "strata_http_request_duration_seconds",
            "Time from a request's arrival to its answer's last byte, by route template",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.embedding_seconds = Histogram(
            "strata_embedding_duration_seconds",
            "Time of one call to the embedder (query: a request's; bulk: promotion's batches)",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.embedding_batch = Histogram(
            "strata_embedding_batch_size",
            "Texts per call to the embedder",
            ["kind"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.embedding_texts = Counter(
            "strata_embedding_texts", "Texts embedded", ["kind"], registry=r
        )
        self.promotion_seconds = Histogram(
            "strata_promotion_batch_duration_seconds",
            "Time of one promotion pass that found work (log -> indexed memories)",
            buckets=BATCH_SECONDS_BUCKETS,
            registry=r,
        )
        self.promotion_messages = Histogram(
            "strata_promotion_batch_messages",
            "Messages promoted by one pass that found work",
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.promotion_failures = Counter(
            "strata_promotion_pass_failures", "Promotion passes that raised", registry=r
        )
        self.heap_trims = Counter(
            "strata_heap_trims",
            "Times the worker gave free heap back to the system (docs/reliability.md, Memory)",
            registry=r,
        )
        self.job_seconds = Histogram(
            "strata_job_duration_seconds",
            "Time of one job attempt, by kind and outcome (succeeded, failed, lost)",
            ["kind", "outcome"],
            buckets=BATCH_SECONDS_BUCKETS,
            registry=r,
        )

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "OTHER"
        key = (method, route, status)
        child = self._request_children.get(key)
        if child is None:  # once per series: labels() takes a lock and checks its values
            child = self.requests.labels(method, route, str(status))
            self._request_children[key] = child
        child.observe(seconds)

    def observe_promotion(self, seconds: float, messages: int) -> None:
        if messages > 0:  # idle passes would drown the distribution in zeros
            self.promotion_seconds.observe(seconds)
            self.promotion_messages.observe(messages)

    def render(
        self, lag: Sequence[IndexLag] | None, memories: Sequence[MemoryCount] | None
    ) -> bytes:
        """The exposition text: this process's (or, multiprocess, every process's) values,
        then the scrape-time gauges (None: they could not be read, and are left out)."""
        if self.multiprocess_dir is not None:
            merged = CollectorRegistry()
            MultiProcessCollector(merged, path=str(self.multiprocess_dir))  # type: ignore[no-untyped-call]
            own = generate_latest(merged)
        else:
            own = generate_latest(self.registry)
        scrape = CollectorRegistry()
        scrape.register(_ScrapeGauges(lag, memories))
        return own + generate_latest(scrape)

    def serve(self, port: int, addr: str = "0.0.0.0") -> WSGIServer:
        """This process's values on a port of their own, from a daemon thread (the worker,
        which has no api); `shutdown()` the server returned to stop it."""
        registry = self.registry
        if self.multiprocess_dir is not None:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(self.multiprocess_dir))  # type: ignore[no-untyped-call]
        server, _ = start_http_server(port, addr=addr, registry=registry)
        return server


class _ScrapeGauges(Collector):
    def __init__(
        self, lag: Sequence[IndexLag] | None, memories: Sequence[MemoryCount] | None
    ) -> None:
        self.lag = lag
        self.memories = memories

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "strata_scrape_sql_up",
            "1 when this scrape read its SQL figures (index lag, memories), 0 when it could not",
            value=0 if self.lag is None or self.memories is None else 1,
        )
        if self.lag is None or self.memories is None:
            return [up]
        messages = GaugeMetricFamily(
            "strata_index_lag_messages",
            "Messages accepted into the log and not yet indexed (last_seq - indexed_seq)",
            labels=["tenant"],
        )
        sessions = GaugeMetricFamily(
            "strata_index_lag_sessions",
            "Sessions with messages not yet indexed",
            labels=["tenant"],
        )
        for row in self.lag:
            messages.add_metric([row.tenant_id], row.messages)
            sessions.add_metric([row.tenant_id], row.sessions)
        count = GaugeMetricFamily(
            "strata_memories", "Live memories (not deleted), by type", labels=["tenant", "type"]
        )
        for m in self.memories:
            count.add_metric([m.tenant_id, m.memory_type], m.count)
        return [up, messages, sessions, count]


class RequestMetrics:
    """ASGI middleware: each HTTP request's latency under its route template
    (`/v1/sessions/{session_id}/messages`, never the raw path), method and status.

    Outermost, so the time includes the error handlers and the body; the `Metrics` come from
    the lifespan state, so an app without them (none opened yet) passes requests through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics: Metrics | None = (scope.get("state") or {}).get("metrics")
        if scope["type"] != "http" or metrics is None:
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            elapsed = time.perf_counter() - start
            template = getattr(scope.get("route"), "path", None) or UNMATCHED
            metrics.observe_request(scope["method"], template, status, elapsed)


class MeteredEmbedder:
    """The embedder, counted: calls, texts per call and time, for queries and bulk apart."""

    def __init__(self, inner: Embedder, metrics: Metrics) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.local = inner.local
        self._seconds = {k: metrics.embedding_seconds.labels(k) for k in ("query", "bulk")}
        self._batch = {k: metrics.embedding_batch.labels(k) for k in ("query", "bulk")}
        self._texts = {k: metrics.embedding_texts.labels(k) for k in ("query", "bulk")}

    async def embed(
        self, texts: Sequence[str], *, bulk: bool = False, query: bool = False
    ) -> list[list[float]]:
        kind = "bulk" if bulk else "query"
        start = time.perf_counter()
        try:
            return await self.inner.embed(texts, bulk=bulk, query=query)
        finally:
            self._seconds[kind].observe(time.perf_counter() - start)
            self._batch[kind].observe(len(texts))
            self._texts[kind].inc(len(texts))

    async def close(self) -> None:
        await self.inner.close()
