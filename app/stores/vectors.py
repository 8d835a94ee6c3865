"""The vector index (L3 search): one small interface, two Qdrant implementations.

- `app.stores.qdrant_server.QdrantServerIndex`: a Qdrant server or cluster through
  `AsyncQdrantClient` (and, in tests, qdrant-client's local mode, which evaluates filters in
  Python and is never a runtime default).
- `app.stores.qdrant_edge.QdrantEdgeIndex`: Qdrant's engine in-process (qdrant-edge-py), for
  the embedded mode.

Each point is a memory: named vectors `dense` (cosine; the turn blended with the turns
before it, what dense search matches), `turn` (cosine; the memory's own text alone, for the
calibrated relevance and change promotion) and `sparse` (BM25 term weights, IDF applied by
Qdrant), and a payload that lets recall answer without a database trip.
Each implementation lives in its own module, so a process imports only the client it uses.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import numpy as np
from numpy.typing import NDArray

from app.core.terms import SparseVec

if TYPE_CHECKING:
    from app.stores.models import Memory

KEYWORD_FIELDS = ("tenant_id", "user_id", "kind", "memory_type", "session_id", "source_sessions")
# The index's schema, in the collection's name: a new named vector or payload field means a
# new collection, rebuilt from SQL by the `reindex` job (`Reindexer.job`), which a worker
# enqueues at start when the collection is empty and SQL holds live memories. A new index on
# a field the payload already has needs no rebuild: both backends add missing indexes when
# they open a collection.
# v3: Chinese index terms without pronouns and question words (app/core/terms.py).
# v4: each turn's terms carry the next turn's (app/core/chunking.py, `Chunk.after`).
# (The embedded index's sparse vector lost Qdrant's IDF modifier without a new version,
# which would have re-embedded a server's collection too: a shard with the modifier is
# emptied at open and rebuilt, app/stores/qdrant_edge.py.)
SCHEMA_VERSION = 4
# `valid_to`: every recall filters on it (`must_not valid_to <= valid_at`). Unindexed, each
# candidate the search visits reads its payload for it: 3.5-5 ms of a 1k-10k memory recall's
# index query, 0.5-1 ms with the index (bench/HISTORY.md, "Less CPU per recall"); the same
# points pass the filter either way.
FLOAT_FIELDS = ("created_at", "valid_to")


class PayloadPatch(TypedDict, total=False):
    """The payload fields that may change on a stored point without re-embedding it."""

    session_id: str | None
    memory_type: str
    importance: float
    pinned: bool
    metadata: dict[str, Any]
    sources: list[dict[str, Any]]
    created_at: datetime
    access_count: int
    last_accessed_at: datetime | None
    valid_to: datetime | None


@dataclass(frozen=True, slots=True)
class MemoryPayload:
    """A point's payload: what recall filters on and returns without a database trip.

    The one definition of the schema: `to_dict` is the stored form (times as epoch seconds,
    which the index range-filters; no session as ""; flags as 0/1), `from_dict` reads it
    back, and `encode_patch` writes a part of it the same way.
    """

    tenant_id: str
    user_id: str
    session_id: str | None
    memory_type: str
    content: str
    importance: float
    sources: list[dict[str, Any]]
    metadata: dict[str, Any]
    created_at: datetime
    pinned: bool = False
    access_count: int = 0
    last_accessed_at: datetime | None = None
    kind: str = "memory"
    # When a fact stopped being true (superseded or contradicted, docs/facts.md); None while
    # it holds. Recall's valid-time filter hides a point from `valid_to` on.
    valid_to: datetime | None = None
    # The speaker's role of a promoted turn (its content is "speaker: text"); None for a
    # memory a caller wrote. Fixed at creation, like the content.
    role: str | None = None

    @classmethod
    def from_row(cls, row: Memory, role: str | None = None) -> MemoryPayload:
        """The payload of a memory row. `role` is not a column: the speaker's role of the
        turn a promoted memory came from (None for a memory a caller wrote or rewrote)."""
        return cls(
            tenant_id=row.tenant_id,
            user_id=row.user_id,
            session_id=row.session_id,
            memory_type=row.memory_type,
            content=row.content,
            importance=row.importance,
            sources=row.sources,
            metadata=row.metadata_,
            created_at=row.created_at,
            pinned=row.pinned,
            access_count=row.access_count,
            last_accessed_at=row.last_accessed_at,
            valid_to=row.valid_to,
            role=role,
        )

    def as_patch(self) -> PayloadPatch:
        """Every field that may change in place (all but the scope, kind and content)."""
        return {
            "session_id": self.session_id,
            "memory_type": self.memory_type,
            "importance": self.importance,
            "pinned": self.pinned,
            "metadata": self.metadata,
            "sources": self.sources,
            "created_at": self.created_at,
            "access_count": self.access_count,
            "last_accessed_at": self.last_accessed_at,
            "valid_to": self.valid_to,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "kind": self.kind,
            "content": self.content,
            "role": self.role,
            **encode_patch(self.as_patch()),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> MemoryPayload:
        last = raw.get("last_accessed_at")
        valid_to = raw.get("valid_to")
        return cls(
            tenant_id=raw["tenant_id"],
            user_id=raw["user_id"],
            session_id=raw.get("session_id") or None,
            memory_type=raw["memory_type"],
            content=raw["content"],
            importance=float(raw.get("importance", 0.5)),
            sources=list(raw.get("sources") or []),
            metadata=dict(raw.get("metadata") or {}),
            created_at=datetime.fromtimestamp(raw["created_at"], UTC),
            pinned=bool(raw.get("pinned")),
            access_count=int(raw.get("access_count", 0)),
            last_accessed_at=datetime.fromtimestamp(last, UTC) if last is not None else None,
            kind=raw.get("kind", "memory"),
            valid_to=datetime.fromtimestamp(valid_to, UTC) if valid_to is not None else None,
            role=raw.get("role"),
        )

    @property
    def text(self) -> str:
        """The content without the "speaker: " a promoted turn starts with."""
        return self.text_of(self.content, self.role)

    @staticmethod
    def text_of(content: str, role: str | None) -> str:
        if role is None:
            return content
        return content.partition(": ")[2] or content


def _epoch(dt: datetime | None) -> float | None:
    return dt.timestamp() if dt is not None else None


_ENCODE: dict[str, Callable[[Any], Any]] = {
    "session_id": lambda v: v or "",  # a keyword index matches strings, not nulls
    "pinned": int,  # Qdrant Edge 0.9 matched nothing on a boolean value
    "created_at": _epoch,
    "last_accessed_at": _epoch,
    "valid_to": _epoch,
}


def encode_patch(patch: PayloadPatch) -> dict[str, Any]:
    """The stored form of some payload fields, as `MemoryPayload.to_dict` writes them."""
    out: dict[str, Any] = {}
    for key, value in patch.items():
        encode = _ENCODE.get(key)
        out[key] = encode(value) if encode else value
    if "metadata" in patch:
        out["meta_filter"] = filterable(patch["metadata"])
    if "sources" in patch:
        out["source_sessions"] = source_sessions(patch["sources"])
    return out


def source_sessions(sources: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every session a memory was sourced from, as the index filters recall's `session_id`
    (a keyword array matches when any element does). Derived from `sources`, so every
    patch that changes them (a merge, a session deleted) keeps it in step."""
    return sorted({str(s["session_id"]) for s in sources if s.get("session_id")})


def filterable(metadata: Mapping[str, Any]) -> dict[str, str | int]:
    """The top-level scalar metadata as the index filters it. Booleans go under their own
    `bool:` keys as 0/1 (Qdrant Edge 0.9 matches nothing on a boolean value), so that
    `true` never matches the integer 1."""
    out: dict[str, str | int] = {}
    for key, value in metadata.items():
        if isinstance(value, bool):
            out[f"bool:{key}"] = int(value)
        elif isinstance(value, str | int):
            out[key] = value
    return out


@dataclass(slots=True)
class VectorPoint:
    id: uuid.UUID
    dense: list[float]
    sparse: SparseVec
    payload: MemoryPayload
    turn: list[float] | None = None  # the memory's own text alone; None: same as `dense`

    @property
    def turn_vector(self) -> list[float]:
        return self.turn if self.turn is not None else self.dense


@dataclass(slots=True)
class VectorQuery:
    """Two candidate lists scoped to one user of one tenant (the scope is not optional):
    the `limit` nearest by the dense vector and the `limit` best by the sparse terms (IDF
    over this user's memories), under the same filters. Recall fuses them itself."""

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
    # Only memories with a source in one of these sessions (recall's `session_ids`).
    source_sessions: tuple[str, ...] | None = None
    # Valid time (epoch seconds): only points still true then, i.e. without a `valid_to`
    # at or before it (docs/facts.md). None: no valid-time filter.
    valid_at: float | None = None
    # The hits for which this gives a cosine (recall: those that state a change, and the
    # conversation's turns a rewrite read) are compared with the other hits by turn vector,
    # in the same call: `VectorHit.similar`, the hits at that cosine or above with their
    # cosines (each stage then applies its own threshold). None for a hit: not compared.
    # An index whose hits carry their stored vectors may leave it to the caller.
    compare_turns: Callable[[MemoryPayload], float | None] | None = None
    # The query's cosines with each hit's vectors (`VectorHit.cosines`, relevance reads
    # them); a caller that reads only the lists' own scores (fact extraction) skips them.
    with_cosines: bool = True


@dataclass(frozen=True, slots=True)
class StoredVectors:
    """What recall's relevance reads of a hit's stored vectors: the indexed (`dense`) and
    own-turn vectors, and the sparse vector's terms. An index that computes the query's
    cosines itself (`VectorHit.cosines`, the embedded one) leaves `dense` and `turn` empty."""

    dense: Sequence[float] | NDArray[np.float32]
    turn: Sequence[float] | NDArray[np.float32]
    # The query's terms among them as the query's ids; a Qdrant server, which stores them
    # keyed under the user's key, gives the others keyed (docs/privacy.md): match none.
    sparse_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class VectorHit:
    id: uuid.UUID
    score: float  # the list's own score: cosine (dense) or IDF-weighted BM25 (sparse)
    payload: MemoryPayload
    vectors: StoredVectors | None = None
    # The query's cosine with the point's indexed (`dense`) and own-turn vectors, computed
    # in the index: no vector crosses into Python (reading them back and building arrays
    # was a fifth of a recall's GIL time at 100k memories, profiled). None: from `vectors`.
    cosines: tuple[float, float] | None = None
    # The other hits of the query's lists whose turn vector has a cosine with this one's of
    # at least what `VectorQuery.compare_turns` gave for it, with that cosine, when it gave
    # one and the index compared them itself. None: from `vectors`.
    similar: Mapping[uuid.UUID, float] | None = None


@dataclass(frozen=True, slots=True)
class CandidateLists:
    dense: list[VectorHit]  # best first
    sparse: list[VectorHit]  # best first; empty for a query without index terms


# Whether to build an index's graph now, from its points and those written since the last
# build: the graph's upkeep decides (app/services/index_upkeep.py), the index builds.
GraphDue = Callable[[int, int], bool]


class VectorIndex(Protocol):
    collection: str

    async def ensure_collection(self) -> None: ...
    async def upsert(self, points: Sequence[VectorPoint]) -> None: ...
    async def delete(self, ids: Sequence[uuid.UUID]) -> None: ...
    async def set_payload(
        self,
        updates: Sequence[tuple[uuid.UUID, PayloadPatch]],
        *,
        owner: tuple[str, str] | None = None,
    ) -> None:
        """Overwrite these payload fields of points; points that do not exist are skipped.
        `owner`: the (tenant, user) whose points they all are, which a patch of a field the
        user's key seals or tags needs (a Qdrant server, docs/privacy.md)."""
        ...

    async def candidates(self, query: VectorQuery) -> CandidateLists:
        """Both candidate lists, each hit with its payload and its stored vectors or the
        query's cosines with them (`VectorHit.cosines`)."""
        ...

    async def count(self) -> int:
        """Points in the collection (all tenants): 0 means a new, empty index."""
        ...

    async def delete_user(self, tenant_id: str, user_id: str) -> int:
        """Delete every point of one user of one tenant (erasure); how many there were."""
        ...

    async def purge(self) -> bool:
        """Leave no byte of the points deleted so far in the index's files (an erasure's
        last step); False when this index cannot (its files are another process's)."""
        ...

    def keep_graph(self, due: GraphDue) -> None:
        """Build the index's graph whenever `due(points, unbuilt)` holds; an index that
        builds its own (a Qdrant server) ignores it."""
        ...

    async def dense_vectors(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[float]]: ...
    async def ping(self) -> float: ...
    async def close(self) -> None: ...


def collection_name(prefix: str, model_id: str, dim: int) -> str:
    """One collection per embedding model and index schema: a new model or schema means a
    reindex, never mixed vectors."""
    return f"{prefix}_v{SCHEMA_VERSION}_{_safe(model_id)}_{dim}"


def _safe(model_id: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in model_id)


def superseded_collections(names: Iterable[str], prefix: str, model_id: str, dim: int) -> list[str]:
    """The collections that today's (`collection_name`) replaces: the same prefix, model
    and size at an older schema version. An index is rebuilt from SQL whenever its
    collection is empty, so an older one holds nothing that SQL does not; left behind, it
    held its disk (~0.5 GB at 100k memories) for good after an upgrade."""
    head, tail = f"{prefix}_v", f"_{_safe(model_id)}_{dim}"
    out = []
    for name in names:
        version = name[len(head) : len(name) - len(tail)]
        if (
            name.startswith(head)
            and name.endswith(tail)
            and version.isdigit()
            and int(version) < SCHEMA_VERSION
        ):
            out.append(name)
    return sorted(out)


def scope_conditions(q: VectorQuery) -> list[tuple[str, Any]]:
    """The filter of a query as (key, value) pairs; a tuple value means 'any of'."""
    conds: list[tuple[str, Any]] = [("tenant_id", q.tenant_id), ("user_id", q.user_id)]
    if q.memory_types:
        conds.append(("memory_type", tuple(q.memory_types)))
    if q.kinds:
        conds.append(("kind", tuple(q.kinds)))
    if q.source_sessions:
        conds.append(("source_sessions", tuple(q.source_sessions)))
    for key, value in filterable(q.metadata).items():  # booleans under `bool:` keys
        conds.append((meta_path(key), value))
    return conds


def meta_path(key: str) -> str:
    """The path of a `meta_filter` field (a key of `filterable`) in a filter."""
    return f'meta_filter."{key}"' if key.startswith("bool:") else f"meta_filter.{key}"
