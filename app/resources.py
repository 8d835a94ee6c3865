"""The one factory that opens every client: used by the API lifespan and by the worker.

Nothing here runs at import time; every client is opened once per process and closed in
reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast

import httpx
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from sqlalchemy.ext.asyncio import AsyncEngine

from app.core import terms
from app.core.clock import Clock, utc_now
from app.core.tokens import TokenCounter
from app.metrics import MeteredEmbedder, Metrics
from app.providers.embeddings import Embedder, LocalUSE, OpenAIEmbedder
from app.providers.llm import LLM, OpenAICompatibleLLM
from app.providers.piece_table import default_cache_dir
from app.settings import Settings
from app.stores import memories as memory_store
from app.stores.buffer import Breaker, Buffer
from app.stores.db import Database, create_engine, migrate
from app.stores.generations import Generations
from app.stores.signals import Signals
from app.stores.vectors import VectorIndex, collection_name, superseded_collections

log = logging.getLogger("strata")


@dataclass(slots=True)
class Resources:
    settings: Settings
    db: Database
    buffer: Buffer
    vectors: VectorIndex
    embedder: Embedder
    tokens: TokenCounter
    signals: Signals
    metrics: Metrics
    generations: Generations | None  # None: context caches nothing (app/resources.py)
    llm: LLM | None = None  # None: every LLM use falls back to its heuristic
    # "Now" for reinforcement and forgetting: a test or a simulation moves it (app.core.clock).
    clock: Clock = utc_now


def _redis(settings: Settings, beside: Redis | None = None) -> Redis:
    """The client of the settings' Redis; embedded, an in-process stand-in. `beside`: a
    client of the same stand-in (its server) for another event loop (`open_for_thread`)."""
    if settings.redis_url is not None:
        # Short time-outs and no retries inside the client: a frozen Redis must cost one
        # time-out, after which the breaker skips it (the log is the truth).
        return Redis.from_url(
            settings.redis_url.get_secret_value(),
            socket_timeout=settings.redis_timeout_seconds,
            socket_connect_timeout=settings.redis_timeout_seconds,
            retry=Retry(NoBackoff(), 0),
        )
    # Embedded: an in-process stand-in, owned by these resources. The api and the
    # in-process worker share the one client (and so its keys and pub/sub); a second app in
    # the same process (tests) gets a server of its own.
    import fakeredis

    server = (
        beside.connection_pool.connection_kwargs["server"] if beside is not None else None
    )  # its state is under a lock of its own: clients on two threads may share it
    return fakeredis.FakeAsyncRedis(server=server or fakeredis.FakeServer())


def _embedder(settings: Settings) -> Embedder:
    if settings.embedder == "openai":
        if not settings.embedding_url:
            raise ValueError("STRATA_EMBEDDING_URL is required with STRATA_EMBEDDER=openai")
        key = settings.embedding_api_key
        headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}
        client = httpx.AsyncClient(
            base_url=settings.embedding_url,
            headers=headers,
            timeout=settings.embedding_timeout_seconds,
        )
        return OpenAIEmbedder(
            client,
            model=settings.embedding_model,
            dim=settings.embedding_dim,
            query_model=settings.embedding_query_model,
            query_prefix=settings.embedding_query_prefix,
            document_prefix=settings.embedding_document_prefix,
        )
    return LocalUSE(
        bulk_threads=settings.embed_bulk_threads,
        query_batch_max=settings.embed_query_batch_max,
        query_wait_seconds=settings.embed_query_batch_wait_ms / 1000,
        table_dir=(settings.model_cache_dir or default_cache_dir())
        if settings.encoder_table == "file"
        else None,
    )


def _llm(settings: Settings) -> LLM | None:
    if not settings.llm_url:
        return None
    key = settings.llm_api_key
    client = httpx.AsyncClient(
        base_url=settings.llm_url,
        headers={"Authorization": f"Bearer {key.get_secret_value()}"} if key else {},
        timeout=settings.llm_timeout_seconds,
    )
    return OpenAICompatibleLLM(
        client, model=settings.llm_model, max_attempts=settings.llm_max_attempts
    )


def _vectors(settings: Settings, embedder: Embedder, db: Database) -> VectorIndex:
    """The vector index the settings name: a Qdrant server, or Qdrant Edge's embedded shard.
    A server's payload text is sealed under each user's key, read from `db` (its files
    cannot be purged after an erasure; the embedded shard's are, docs/privacy.md)."""
    name = collection_name(settings.collection_prefix, embedder.model_id, embedder.dim)
    # Imported where chosen: a process loads only the Qdrant client it uses.
    if settings.qdrant_url:
        from app.stores.qdrant_server import QdrantServerIndex
        from app.stores.user_keys import UserKeys

        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return QdrantServerIndex.connect(
            settings.qdrant_url, api_key, name, embedder.dim, keys=UserKeys(db)
        )
    else:
        from app.stores.qdrant_edge import QdrantEdgeIndex

        root = settings.data_dir / "qdrant"
        return QdrantEdgeIndex(
            root,
            name,
            embedder.dim,
            vector_cache_bytes=settings.index_vector_cache_mb * 2**20,
            superseded=superseded_collections(
                # `<name>`, `<name>.gen<ms>` (a built graph), `<name>.current`
                {p.name.partition(".")[0] for p in root.glob("*")},
                settings.collection_prefix,
                embedder.model_id,
                embedder.dim,
            ),
        )


async def _open_vectors(vectors: VectorIndex, db: Database, *, embedded: bool) -> None:
    await vectors.ensure_collection()
    if embedded:  # the embedded index reads its payloads' use from SQL
        from app.stores.qdrant_edge import QdrantEdgeIndex

        async with db.read() as tx:
            cast(QdrantEdgeIndex, vectors).load_uses(await memory_store.uses(tx))


async def _warn_purge_blockers(db: Database) -> None:
    """Once at start: what keeps an erasure's receipt from saying the database's files are
    purged (docs/privacy.md, "What stays on disk"), naming what to change."""
    try:
        reasons = await db.purge_blockers()
    except Exception as exc:  # a database not up yet is the probes' to report, not ours
        log.warning("could not check the database's purge settings: %s", type(exc).__name__)
        return
    if reasons:
        log.warning(
            "erasure receipts will say purged_from_disk.database false: %s "
            "(or STRATA_ERASURE_PURGE_DATABASE=false to skip the purge)",
            "; ".join(reasons),
        )


def _engines(settings: Settings) -> tuple[AsyncEngine, AsyncEngine | None]:
    """The writer's engine, and on SQLite the readers' (app/stores/db.py)."""
    dsn = settings.database_dsn
    return (
        create_engine(dsn, lock_timeout_seconds=settings.db_lock_timeout_seconds),
        create_engine(dsn, readonly=True) if settings.is_sqlite else None,
    )


@contextlib.asynccontextmanager
async def open_resources(settings: Settings) -> AsyncIterator[Resources]:
    async with contextlib.AsyncExitStack() as stack:
        if settings.auto_migrate:
            await migrate(settings.database_dsn)
        db = Database(*_engines(settings))
        stack.push_async_callback(db.close)
        if settings.erasure_purge_database:
            await _warn_purge_blockers(db)

        redis = _redis(settings)
        breaker = Breaker(settings.redis_retry_seconds)
        buffer = Buffer(
            redis,
            window=settings.buffer_window,
            ttl_seconds=settings.buffer_ttl_seconds,
            breaker=breaker,
        )
        stack.push_async_callback(buffer.close)
        # Embedded, the api and its worker share one process: signals stay in it.
        signals = Signals(redis if settings.redis_url is not None else None, breaker)
        signals.start()
        stack.push_async_callback(signals.close)
        # Context's cached reads end when a commit here, or in another process, may have
        # changed them (app/services/context_cache.py): over Redis, or in the process when
        # it is the only one, as with the embedded index (one process opens Qdrant Edge's
        # shard; `Settings.refusal` stops a worker of its own). With a Qdrant server and
        # no Redis, processes sharing the database could not tell each other: no cache.
        generations: Generations | None = None
        if settings.redis_url is not None or settings.qdrant_url is None:
            generations = Generations(redis if settings.redis_url is not None else None, breaker)
            db.after_commit(generations.bump)

        metrics = Metrics(settings.metrics_multiproc_dir)
        raw_embedder = _embedder(settings)
        stack.push_async_callback(raw_embedder.close)
        if isinstance(raw_embedder, LocalUSE):
            await asyncio.to_thread(raw_embedder.load)
        embedder: Embedder = MeteredEmbedder(raw_embedder, metrics)
        await asyncio.to_thread(terms.warm_up)

        vectors = _vectors(settings, embedder, db)
        stack.push_async_callback(vectors.close)
        await _open_vectors(vectors, db, embedded=settings.qdrant_url is None)

        tokens = TokenCounter(settings.tokenizer)
        llm = _llm(settings)
        if llm is not None:
            stack.push_async_callback(llm.close)
        log.info(
            "resources open: db=%s redis=%s vectors=%s embedder=%s llm=%s",
            db.dialect,
            "server" if settings.redis_url else "in-process",
            "server" if settings.qdrant_url else "edge",
            embedder.model_id,
            llm.model if llm is not None else "none",
        )
        yield Resources(
            settings, db, buffer, vectors, embedder, tokens, signals, metrics, generations, llm
        )


@contextlib.asynccontextmanager
async def open_for_thread(resources: Resources) -> AsyncIterator[Resources]:
    """`resources` for another event loop of the process, opened and closed on it (the
    worker's thread, app/worker.py): clients bound to the loop that opened them are its own
    (the database's engines, sharing the writer lock and the commit hooks; the buffer's
    Redis client, on the same in-process server; the HTTP clients of the LLM and of a
    remote embedder), the rest is the process's one (the embedded index, the local
    encoder, the signals, the metrics, the change marks). Only embedded
    (`Settings.worker_on_thread`): a Qdrant server's client, and the Redis client through
    which the signals and the change marks publish, are the api loop's."""
    settings = resources.settings
    if not settings.worker_on_thread:
        raise RuntimeError("only the embedded stores are shared across event loops")
    async with contextlib.AsyncExitStack() as stack:
        db = resources.db.sibling(*_engines(settings))
        stack.push_async_callback(db.close)
        buffer = Buffer(
            _redis(settings, beside=resources.buffer.redis),
            window=settings.buffer_window,
            ttl_seconds=settings.buffer_ttl_seconds,
            breaker=resources.buffer.breaker,
        )
        stack.push_async_callback(buffer.close)
        embedder = resources.embedder
        if settings.embedder == "openai":  # over HTTP: a client of this loop's
            remote = _embedder(settings)
            stack.push_async_callback(remote.close)
            embedder = MeteredEmbedder(remote, resources.metrics)
        llm = _llm(settings)
        if llm is not None:
            stack.push_async_callback(llm.close)
        yield dataclasses.replace(resources, db=db, buffer=buffer, embedder=embedder, llm=llm)
