"""The vector index (L3 search): one small interface, two Qdrant implementations.

- `QdrantServerIndex`: a Qdrant server or cluster through `AsyncQdrantClient` (and, in
  tests, qdrant-client's local mode, which evaluates filters in Python and is never a
  runtime default).
- `QdrantEdgeIndex`: Qdrant's engine in-process (qdrant-edge-py), for the embedded mode.
  Its calls are synchronous and hold the GIL, so they run in a worker thread.

Each point is a memory: named vectors `dense` (cosine) and `sparse` (BM25 term weights,
IDF applied by Qdrant), and a payload that lets recall answer without a database trip.
Flags are stored as integers: Edge 0.9 matched nothing on a boolean `MatchValue(True)`.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm

from app.core.terms import SparseVec
from app.errors import VectorStoreUnavailable

KEYWORD_FIELDS = ("tenant_id", "user_id", "kind", "memory_type", "session_id")
FLOAT_FIELDS = ("created_at",)


@dataclass(slots=True)
class VectorPoint:
    id: uuid.UUID
    dense: list[float]
    sparse: SparseVec
    payload: dict[str, Any]


@dataclass(slots=True)
class VectorQuery:
    """A hybrid query scoped to one user of one tenant; the scope is not optional."""

    tenant_id: str
    user_id: str
    dense: list[float]
    sparse: SparseVec
    limit: int
    memory_types: list[str] | None = None
    kinds: list[str] | None = None
    created_from: float | None = None
    created_to: float | None = None
    metadata: dict[str, str | int | bool] = field(default_factory=dict)
    dense_weight: float = 1.0
    sparse_weight: float = 1.0
    rrf_k: int = 60


@dataclass(frozen=True, slots=True)
class VectorHit:
    id: uuid.UUID
    score: float
    payload: dict[str, Any]


class VectorIndex(Protocol):
    collection: str

    async def ensure_collection(self) -> None: ...
    async def upsert(self, points: Sequence[VectorPoint]) -> None: ...
    async def delete(self, ids: Sequence[uuid.UUID]) -> None: ...
    async def set_payload(self, updates: Sequence[tuple[uuid.UUID, dict[str, Any]]]) -> None:
        """Merge payload keys into points; points that do not exist are skipped."""
        ...

    async def search(self, query: VectorQuery) -> list[VectorHit]: ...
    async def dense_vectors(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[float]]: ...
    async def ping(self) -> float: ...
    async def close(self) -> None: ...


def collection_name(prefix: str, model_id: str, dim: int) -> str:
    """One collection per embedding model: a new model means a reindex, never mixed vectors."""
    safe = "".join(c if c.isalnum() else "_" for c in model_id)
    return f"{prefix}_{safe}_{dim}"


def _scope_conditions(q: VectorQuery) -> list[tuple[str, Any]]:
    """The filter of a query as (key, value) pairs; a tuple value means 'any of'."""
    conds: list[tuple[str, Any]] = [("tenant_id", q.tenant_id), ("user_id", q.user_id)]
    if q.memory_types:
        conds.append(("memory_type", tuple(q.memory_types)))
    if q.kinds:
        conds.append(("kind", tuple(q.kinds)))
    for key, value in q.metadata.items():  # see `filterable` in the promotion service
        conds.append((f"meta_filter.{key}", int(value) if isinstance(value, bool) else value))
    return conds


# --------------------------------------------------------------------------- server


class QdrantServerIndex:
    def __init__(
        self, client: AsyncQdrantClient, collection: str, dim: int, *, local: bool = False
    ) -> None:
        self.client = client
        self.collection = collection
        self.dim = dim
        self.local = local  # qdrant-client local mode: payload indexes do not exist there

    @classmethod
    def connect(cls, url: str, api_key: str | None, collection: str, dim: int) -> QdrantServerIndex:
        if url == ":memory:":
            return cls(AsyncQdrantClient(location=":memory:"), collection, dim, local=True)
        if url.startswith("path:"):
            client = AsyncQdrantClient(path=url.removeprefix("path:"))
            return cls(client, collection, dim, local=True)
        return cls(AsyncQdrantClient(url=url, api_key=api_key, timeout=10), collection, dim)

    async def ensure_collection(self) -> None:
        try:
            if await self.client.collection_exists(self.collection):
                return
            await self.client.create_collection(
                self.collection,
                vectors_config={
                    "dense": qm.VectorParams(size=self.dim, distance=qm.Distance.COSINE)
                },
                sparse_vectors_config={"sparse": qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
            )
            if self.local:
                return
            for name in KEYWORD_FIELDS:
                await self.client.create_payload_index(
                    self.collection,
                    name,
                    qm.KeywordIndexParams(
                        type=qm.KeywordIndexType.KEYWORD,
                        is_tenant=name in ("tenant_id", "user_id"),
                    ),
                )
            for name in FLOAT_FIELDS:
                await self.client.create_payload_index(
                    self.collection, name, qm.PayloadSchemaType.FLOAT
                )
        except Exception as exc:
            raise VectorStoreUnavailable(f"cannot prepare collection: {exc}") from exc

    async def upsert(self, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        structs = [
            qm.PointStruct(
                id=str(p.id),
                vector={
                    "dense": p.dense,
                    "sparse": qm.SparseVector(indices=p.sparse.indices, values=p.sparse.values),
                },
                payload=p.payload,
            )
            for p in points
        ]
        await self._call(self.client.upsert(self.collection, structs, wait=True))

    async def delete(self, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            selector = qm.PointIdsList(points=[str(i) for i in ids])
            await self._call(self.client.delete(self.collection, selector, wait=True))

    async def set_payload(self, updates: Sequence[tuple[uuid.UUID, dict[str, Any]]]) -> None:
        if not updates:
            return
        # A point may be gone (deleted meanwhile); the rest still gets its update.
        found = await self._call(
            self.client.retrieve(
                self.collection,
                [str(pid) for pid, _ in updates],
                with_payload=False,
                with_vectors=False,
            )
        )
        present = {str(r.id) for r in found}
        ops = [
            qm.SetPayloadOperation(set_payload=qm.SetPayload(payload=payload, points=[str(pid)]))
            for pid, payload in updates
            if str(pid) in present
        ]
        if ops:
            await self._call(self.client.batch_update_points(self.collection, ops, wait=True))

    def _filter(self, q: VectorQuery) -> qm.Filter:
        must: list[qm.Condition] = []
        for key, value in _scope_conditions(q):
            match: qm.MatchValue | qm.MatchAny = (
                qm.MatchAny(any=list(value))
                if isinstance(value, tuple)
                else qm.MatchValue(value=value)
            )
            must.append(qm.FieldCondition(key=key, match=match))
        if q.created_from is not None or q.created_to is not None:
            must.append(
                qm.FieldCondition(
                    key="created_at", range=qm.Range(gte=q.created_from, lte=q.created_to)
                )
            )
        return qm.Filter(must=must)

    async def search(self, query: VectorQuery) -> list[VectorHit]:
        flt = self._filter(query)
        prefetch = [qm.Prefetch(query=query.dense, using="dense", filter=flt, limit=query.limit)]
        weights = [query.dense_weight]
        if query.sparse.indices:
            # IDF over this user's memories, not the whole collection (+0.01 R@10).
            idf = None if self.local else qm.IdfCorpusParams(corpus=self._user_filter(query))
            prefetch.append(
                qm.Prefetch(
                    query=qm.SparseVector(indices=query.sparse.indices, values=query.sparse.values),
                    using="sparse",
                    filter=flt,
                    limit=query.limit,
                    params=qm.SearchParams(idf=idf) if idf else None,
                )
            )
            weights.append(query.sparse_weight)
        fusion = qm.RrfQuery(rrf=qm.Rrf(k=query.rrf_k, weights=weights))
        result = await self._call(
            self.client.query_points(
                self.collection,
                prefetch=prefetch,
                query=fusion,
                limit=query.limit,
                with_payload=True,
            )
        )
        return [VectorHit(uuid.UUID(str(p.id)), p.score, p.payload or {}) for p in result.points]

    @staticmethod
    def _user_filter(q: VectorQuery) -> qm.Filter:
        return qm.Filter(
            must=[
                qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=q.tenant_id)),
                qm.FieldCondition(key="user_id", match=qm.MatchValue(value=q.user_id)),
            ]
        )

    async def dense_vectors(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[float]]:
        if not ids:
            return {}
        records = await self._call(
            self.client.retrieve(
                self.collection, [str(i) for i in ids], with_payload=False, with_vectors=["dense"]
            )
        )
        out: dict[uuid.UUID, list[float]] = {}
        for r in records:
            vector = r.vector.get("dense") if isinstance(r.vector, dict) else None
            if isinstance(vector, list):
                out[uuid.UUID(str(r.id))] = [float(x) for x in vector]
        return out

    async def ping(self) -> float:
        start = time.perf_counter()
        await self._call(self.client.collection_exists(self.collection))
        return (time.perf_counter() - start) * 1000

    async def close(self) -> None:
        await self.client.close()

    @staticmethod
    async def _call(awaitable: Any) -> Any:
        try:
            return await awaitable
        except Exception as exc:
            raise VectorStoreUnavailable(str(exc) or type(exc).__name__) from exc


# --------------------------------------------------------------------------- edge


class QdrantEdgeIndex:
    """Qdrant Edge on disk. One process owns a storage path; calls go through one thread."""

    def __init__(self, path: Path, collection: str, dim: int) -> None:
        self.path = path / collection
        self.collection = collection
        self.dim = dim
        self._shard: Any = None
        self._lock = threading.Lock()

    async def ensure_collection(self) -> None:
        await asyncio.to_thread(self._open)

    def _open(self) -> None:
        import qdrant_edge as qe

        config = qe.EdgeConfig(
            vectors={"dense": qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine)},
            sparse_vectors={"sparse": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        )
        if (self.path / "edge_config.json").exists() or any(self.path.glob("segments*")):
            self._shard = qe.EdgeShard.load(str(self.path))
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            self._shard = qe.EdgeShard.create(str(self.path), config)
            for name in KEYWORD_FIELDS:
                self._shard.update(
                    qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword)
                )
            for name in FLOAT_FIELDS:
                self._shard.update(
                    qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Float)
                )

    async def _run(self, fn: Any, *args: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                if self._shard is None:
                    raise VectorStoreUnavailable("the vector index is closed")
                return fn(*args)

        try:
            return await asyncio.to_thread(locked)
        except VectorStoreUnavailable:
            raise
        except Exception as exc:
            raise VectorStoreUnavailable(str(exc) or type(exc).__name__) from exc

    async def upsert(self, points: Sequence[VectorPoint]) -> None:
        import qdrant_edge as qe

        if not points:
            return
        edge_points = [
            qe.Point(
                p.id,
                {"dense": p.dense, "sparse": qe.SparseVector(p.sparse.indices, p.sparse.values)},
                p.payload,
            )
            for p in points
        ]
        await self._run(lambda: self._shard.update(qe.UpdateOperation.upsert_points(edge_points)))

    async def delete(self, ids: Sequence[uuid.UUID]) -> None:
        import qdrant_edge as qe

        if ids:
            op = qe.UpdateOperation.delete_points(list(ids))
            await self._run(lambda: self._shard.update(op))

    async def set_payload(self, updates: Sequence[tuple[uuid.UUID, dict[str, Any]]]) -> None:
        import qdrant_edge as qe

        if not updates:
            return

        def apply() -> None:
            for pid, payload in updates:
                try:
                    self._shard.update(qe.UpdateOperation.set_payload([pid], payload))
                except Exception as exc:  # a point deleted meanwhile; the rest goes on
                    if "No point with id" not in str(exc):
                        raise

        await self._run(apply)

    def _filter(self, q: VectorQuery) -> Any:
        import qdrant_edge as qe

        must: list[Any] = []
        for key, value in _scope_conditions(q):
            match = qe.MatchAny(list(value)) if isinstance(value, tuple) else qe.MatchValue(value)
            must.append(qe.FieldCondition(key, match=match))
        if q.created_from is not None or q.created_to is not None:
            must.append(
                qe.FieldCondition(
                    "created_at", range=qe.RangeFloat(gte=q.created_from, lte=q.created_to)
                )
            )
        return qe.Filter(must=must)

    async def search(self, query: VectorQuery) -> list[VectorHit]:
        import qdrant_edge as qe

        flt = self._filter(query)
        prefetches = [
            qe.Prefetch(query.limit, query=qe.Query.Nearest(query.dense, using="dense"), filter=flt)
        ]
        weights = [query.dense_weight]
        if query.sparse.indices:
            user = qe.Filter(
                must=[
                    qe.FieldCondition("tenant_id", match=qe.MatchValue(query.tenant_id)),
                    qe.FieldCondition("user_id", match=qe.MatchValue(query.user_id)),
                ]
            )
            sparse = qe.SparseVector(query.sparse.indices, query.sparse.values)
            prefetches.append(
                qe.Prefetch(
                    query.limit,
                    query=qe.Query.Nearest(sparse, using="sparse"),
                    filter=flt,
                    # IDF over this user's memories, not the whole shard (+0.01 R@10).
                    params=qe.SearchParams(idf=qe.IdfParams(corpus=user)),
                )
            )
            weights.append(query.sparse_weight)
        request = qe.QueryRequest(
            limit=query.limit,
            prefetches=prefetches,
            query=qe.Fusion.Rrf(query.rrf_k, weights),  # type: ignore[arg-type]
            with_payload=True,
        )
        points = await self._run(lambda: self._shard.query(request))
        return [VectorHit(_as_uuid(p.id), p.score, p.payload or {}) for p in points]

    async def dense_vectors(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[float]]:
        if not ids:
            return {}
        records = await self._run(
            lambda: self._shard.retrieve(list(ids), with_payload=False, with_vector=["dense"])
        )
        out: dict[uuid.UUID, list[float]] = {}
        for r in records:
            vector = r.vector.get("dense") if isinstance(r.vector, dict) else None
            if vector is not None:
                out[_as_uuid(r.id)] = list(vector)
        return out

    async def ping(self) -> float:
        start = time.perf_counter()
        await self._run(lambda: self._shard.info())
        return (time.perf_counter() - start) * 1000

    async def close(self) -> None:
        def shut() -> None:
            with self._lock:
                if self._shard is not None:
                    self._shard.flush()
                    self._shard.close()
                    self._shard = None

        await asyncio.to_thread(shut)


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
