"""The vector index on a Qdrant server (or qdrant-client's local mode, in tests)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm

from app.errors import VectorStoreUnavailable
from app.stores.vectors import (
    FLOAT_FIELDS,
    KEYWORD_FIELDS,
    CandidateLists,
    GraphDue,
    MemoryPayload,
    PayloadPatch,
    StoredVectors,
    VectorHit,
    VectorPoint,
    VectorQuery,
    encode_patch,
    scope_conditions,
)


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
            have: set[str] = set()
            if await self.client.collection_exists(self.collection):
                if self.local:
                    return
                # A collection from an older version: add the indexes added since
                # (`FLOAT_FIELDS`), built by the server from the payload already stored.
                info = await self.client.get_collection(self.collection)
                have = set(info.payload_schema)
            else:
                await self.client.create_collection(
                    self.collection,
                    vectors_config={
                        name: qm.VectorParams(size=self.dim, distance=qm.Distance.COSINE)
                        for name in ("dense", "turn")
                    },
                    sparse_vectors_config={
                        "sparse": qm.SparseVectorParams(modifier=qm.Modifier.IDF)
                    },
                )
            if self.local:
                return
            for name in KEYWORD_FIELDS:
                if name in have:
                    continue
                await self.client.create_payload_index(
                    self.collection,
                    name,
                    qm.KeywordIndexParams(
                        type=qm.KeywordIndexType.KEYWORD,
                        is_tenant=name in ("tenant_id", "user_id"),
                    ),
                )
            for name in FLOAT_FIELDS:
                if name in have:
                    continue
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
                    "turn": p.turn_vector,
                    "sparse": qm.SparseVector(indices=p.sparse.indices, values=p.sparse.values),
                },
                payload=p.payload.to_dict(),
            )
            for p in points
        ]
        await self._call(self.client.upsert(self.collection, structs, wait=True))

    async def delete(self, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            selector = qm.PointIdsList(points=[str(i) for i in ids])
            await self._call(self.client.delete(self.collection, selector, wait=True))

    async def set_payload(self, updates: Sequence[tuple[uuid.UUID, PayloadPatch]]) -> None:
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
            qm.SetPayloadOperation(
                set_payload=qm.SetPayload(payload=encode_patch(patch), points=[str(pid)])
            )
            for pid, patch in updates
            if str(pid) in present
        ]
        if ops:
            await self._call(self.client.batch_update_points(self.collection, ops, wait=True))

    def _filter(self, q: VectorQuery) -> qm.Filter:
        must: list[qm.Condition] = []
        for key, value in scope_conditions(q):
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
        # A point without `valid_to` matches no range, so only ended facts are excluded.
        must_not: list[qm.Condition] = []
        if q.valid_at is not None:
            must_not.append(qm.FieldCondition(key="valid_to", range=qm.Range(lte=q.valid_at)))
        return qm.Filter(must=must, must_not=must_not or None)

    async def candidates(self, query: VectorQuery) -> CandidateLists:
        flt = self._filter(query)
        requests = [
            qm.QueryRequest(
                query=query.dense,
                using="dense",
                filter=flt,
                limit=query.limit,
                with_payload=True,
                with_vector=list(_VECTORS),
            )
        ]
        if query.sparse.indices:
            # IDF over this user's memories, not the whole collection (+0.01 R@10).
            idf = None if self.local else qm.IdfCorpusParams(corpus=self._user_filter(query))
            requests.append(
                qm.QueryRequest(
                    query=qm.SparseVector(indices=query.sparse.indices, values=query.sparse.values),
                    using="sparse",
                    filter=flt,
                    limit=query.limit,
                    params=qm.SearchParams(idf=idf) if idf else None,
                    with_payload=True,
                    with_vector=list(_VECTORS),
                )
            )
        responses = await self._call(self.client.query_batch_points(self.collection, requests))
        hits = [[_hit(p) for p in r.points] for r in responses]
        return CandidateLists(hits[0], hits[1] if len(hits) > 1 else [])

    async def count(self) -> int:
        result = await self._call(self.client.count(self.collection, exact=True))
        return int(result.count)

    async def delete_user(self, tenant_id: str, user_id: str) -> int:
        flt = _owner_filter(tenant_id, user_id)
        found = await self._call(self.client.count(self.collection, count_filter=flt, exact=True))
        if found.count:
            selector = qm.FilterSelector(filter=flt)
            await self._call(self.client.delete(self.collection, selector, wait=True))
        return int(found.count)

    def keep_graph(self, due: GraphDue) -> None:
        """The server builds its collection's graph on its own (its optimizer): nothing to
        decide here."""

    async def purge(self) -> bool:
        """The server's files are its own: a deleted point's payload stays in its segments
        until its optimizer vacuums them, and in its write-ahead log until that rotates
        (docs/privacy.md). Nothing is asked of it here."""
        return False

    @staticmethod
    def _user_filter(q: VectorQuery) -> qm.Filter:
        return _owner_filter(q.tenant_id, q.user_id)

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


_VECTORS = ("dense", "turn", "sparse")


def _owner_filter(tenant_id: str, user_id: str) -> qm.Filter:
    return qm.Filter(
        must=[
            qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=tenant_id)),
            qm.FieldCondition(key="user_id", match=qm.MatchValue(value=user_id)),
        ]
    )


def _hit(p: qm.ScoredPoint) -> VectorHit:
    named = p.vector if isinstance(p.vector, dict) else {}
    dense: Any = named.get("dense")
    turn: Any = named.get("turn")
    sparse = named.get("sparse")
    dense_list = [float(x) for x in dense] if isinstance(dense, list) else []
    vectors = StoredVectors(
        dense=dense_list,
        turn=[float(x) for x in turn] if isinstance(turn, list) else dense_list,
        sparse_ids=list(sparse.indices) if isinstance(sparse, qm.SparseVector) else [],
    )
    return VectorHit(
        uuid.UUID(str(p.id)), p.score, MemoryPayload.from_dict(p.payload or {}), vectors
    )
