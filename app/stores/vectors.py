"""The vector index (L3 search): one small interface, two Qdrant implementations.

- `app.stores.qdrant_server.QdrantServerIndex`: a Qdrant server or cluster through
  `AsyncQdrantClient` (and, in tests, qdrant-client's local mode, which evaluates filters in
  Python and is never a runtime default).
- `app.stores.qdrant_edge.QdrantEdgeIndex`: Qdrant's engine in-process (qdrant-edge-py), for
  the embedded mode.

Each point is a memory: named vectors `dense` (cosine) and `sparse` (BM25 term weights,
IDF applied by Qdrant), and a payload that lets recall answer without a database trip.
Each implementation lives in its own module, so a process imports only the client it uses.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.terms import SparseVec

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


def scope_conditions(q: VectorQuery) -> list[tuple[str, Any]]:
    """The filter of a query as (key, value) pairs; a tuple value means 'any of'."""
    conds: list[tuple[str, Any]] = [("tenant_id", q.tenant_id), ("user_id", q.user_id)]
    if q.memory_types:
        conds.append(("memory_type", tuple(q.memory_types)))
    if q.kinds:
        conds.append(("kind", tuple(q.kinds)))
    for key, value in q.metadata.items():  # see `filterable` in the promotion service
        if isinstance(value, bool):
            conds.append((f'meta_filter."bool:{key}"', int(value)))
        else:
            conds.append((f"meta_filter.{key}", value))
    return conds
