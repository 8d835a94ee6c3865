"""The vector index on a Qdrant server (or qdrant-client's local mode, in tests).

The user's text in a point's payload (`content`, `sources`, `metadata`) is stored sealed
under the user's key (`<field>_sealed`, `app.core.sealing`), opened as recall reads it: the
server's files keep a deleted point until its optimizer vacuums them, which the service
cannot ask for, and the erasure destroys the key instead (docs/privacy.md, "What stays on
disk"). Filters match plain fields, but for the user's and sessions' ids and the metadata's
values, stored as keyed tags under the same key; the sparse vector's term ids are keyed too.
A point written before (its fields plain) reads as it is, and filters match it as well.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm

from app.core import sealing
from app.core.terms import SparseVec
from app.errors import VectorStoreUnavailable
from app.stores.user_keys import UserKeys
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
    filterable,
    meta_path,
    scope_conditions,
)

log = logging.getLogger("strata.index")

# The user's text in a payload: sealed (`session_id` too: what a hit reads of it). The rest
# is what filters and scoring read (kinds, times, numbers), kept plain for the server to
# match, but for the user's and sessions' ids (`TAGGED`) and the metadata's scalar values
# (`meta_filter`), kept as tags (`app.core.sealing.tag`). The tenant's id stays plain: it
# names the operator's tenant, not a user.
SEALED = ("content", "sources", "metadata", "session_id")
TAGGED = ("user_id", "session_id", "source_sessions")
# The patched fields a point's owner's key is needed for.
_KEYED = frozenset((*SEALED, *TAGGED, "meta_filter"))


class QdrantServerIndex:
    def __init__(
        self,
        client: AsyncQdrantClient,
        collection: str,
        dim: int,
        *,
        local: bool = False,
        keys: UserKeys | None = None,
    ) -> None:
        self.client = client
        self.collection = collection
        self.dim = dim
        self.local = local  # qdrant-client local mode: payload indexes do not exist there
        self.keys = keys  # None: text stored plain (tests of the index alone)

    @classmethod
    def connect(
        cls,
        url: str,
        api_key: str | None,
        collection: str,
        dim: int,
        *,
        keys: UserKeys | None = None,
    ) -> QdrantServerIndex:
        if url == ":memory:":
            client = AsyncQdrantClient(location=":memory:")
            return cls(client, collection, dim, local=True, keys=keys)
        if url.startswith("path:"):
            client = AsyncQdrantClient(path=url.removeprefix("path:"))
            return cls(client, collection, dim, local=True, keys=keys)
        client = AsyncQdrantClient(url=url, api_key=api_key, timeout=10)
        return cls(client, collection, dim, keys=keys)

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
        owners = {(p.payload.tenant_id, p.payload.user_id) for p in points}
        sealers = await self._sealers(owners)
        structs = []
        for p in points:
            sparse = p.sparse
            if sealers:
                sparse = _keyed_terms(sealers[(p.payload.tenant_id, p.payload.user_id)], sparse)
            vector = {
                "dense": p.dense,
                "turn": p.turn_vector,
                "sparse": qm.SparseVector(indices=sparse.indices, values=sparse.values),
            }
            owner = sealers.get((p.payload.tenant_id, p.payload.user_id))
            payload = _sealed(p.payload.to_dict(), owner, str(p.id))
            structs.append(qm.PointStruct(id=str(p.id), vector=vector, payload=payload))
        await self._call(self.client.upsert(self.collection, structs, wait=True))

    async def delete(self, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            selector = qm.PointIdsList(points=[str(i) for i in ids])
            await self._call(self.client.delete(self.collection, selector, wait=True))

    async def set_payload(
        self,
        updates: Sequence[tuple[uuid.UUID, PayloadPatch]],
        *,
        owner: tuple[str, str] | None = None,
    ) -> None:
        """`owner`: the (tenant, user) every point updated is of, whose key a patched text
        or id is sealed or tagged under (a point stores its user's id as a tag); without
        it, only a point written before (its user's id plain) may have them patched."""
        if not updates:
            return
        # A point may be gone (deleted meanwhile); the rest still gets its update. Plain
        # text a point written before sealing holds in a patched field is deleted.
        found = await self._call(
            self.client.retrieve(
                self.collection,
                [str(pid) for pid, _ in updates],
                with_payload=["tenant_id", "user_id", *SEALED] if self.keys else False,
                with_vectors=False,
            )
        )
        present = {str(r.id): r.payload or {} for r in found}
        encoded = [(str(i), encode_patch(patch)) for i, patch in updates if str(i) in present]
        owners = {
            pid: owner or _plain_owner(present[pid])
            for pid, fields in encoded
            if self.keys is not None and fields.keys() & _KEYED
        }
        if None in owners.values():
            raise ValueError("patching a point's text or ids needs its owner (`owner`)")
        sealers = await self._sealers({o for o in owners.values() if o is not None})
        ops: list[qm.UpdateOperation] = []
        for pid, plain_fields in encoded:
            stored = present[pid]
            mine = owners.get(pid)
            fields = _sealed(plain_fields, sealers[mine] if mine else None, pid)
            ops.append(
                qm.SetPayloadOperation(set_payload=qm.SetPayload(payload=fields, points=[pid]))
            )
            gone = [k for k in SEALED if k in stored and f"{k}_sealed" in fields]
            if plain := [k for k in gone if k not in fields]:
                ops.append(
                    qm.DeletePayloadOperation(
                        delete_payload=qm.DeletePayload(keys=plain, points=[pid])
                    )
                )
        if ops:
            await self._call(self.client.batch_update_points(self.collection, ops, wait=True))

    def _filter(self, q: VectorQuery, key: bytes | None) -> qm.Filter:
        """The query's filter. The user's and sessions' ids and a metadata value are
        matched as stored: their tag under the user's `key` (`_sealed`), or as they are on
        a point written before sealing."""
        tagged = {meta_path(k): k for k in filterable(q.metadata)} if key is not None else {}
        sealer = sealing.Sealer(key) if key is not None else None
        owner = sealing.place(q.tenant_id, q.user_id)
        must: list[qm.Condition] = []
        for path, value in scope_conditions(q):
            if sealer is not None and path in TAGGED:  # the user's, the sessions' ids
                plain = list(value) if isinstance(value, tuple) else [value]
                keyed = [_tag(sealer, owner, path, v, scope="ids") for v in plain]
                must.append(qm.FieldCondition(key=path, match=qm.MatchAny(any=plain + keyed)))
                continue
            match: qm.MatchValue | qm.MatchAny = (
                qm.MatchAny(any=list(value))
                if isinstance(value, tuple)
                else qm.MatchValue(value=value)
            )
            condition = qm.FieldCondition(key=path, match=match)
            if sealer is not None and path in tagged:
                tag = _tag(sealer, owner, tagged[path], value)
                either = [condition, qm.FieldCondition(key=path, match=qm.MatchValue(value=tag))]
                must.append(qm.Filter(should=either))
            else:
                must.append(condition)
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
        # The user's key, cached; read again for a metadata filter, or when nothing matched
        # (the user's id is matched as a tag under their key: one from before an erasure
        # matches none of a user made again under the same id).
        key = None
        fresh = bool(query.metadata)
        if self.keys is not None:
            key = await self._call(self.keys.for_read(query.tenant_id, query.user_id, fresh=fresh))
        responses, plain_of = await self._search(query, key)
        if self.keys is not None and not fresh and not any(r.points for r in responses):
            newer = await self._call(self.keys.for_read(query.tenant_id, query.user_id, fresh=True))
            if newer != key:
                key = newer
                responses, plain_of = await self._search(query, key)
        opener = await self._opener(query.tenant_id, query.user_id, key, responses)
        hits = [
            [_hit(p, payload, plain_of) for p in r.points if (payload := opener(p)) is not None]
            for r in responses
        ]
        return CandidateLists(hits[0], hits[1] if len(hits) > 1 else [])

    async def _search(
        self, query: VectorQuery, key: bytes | None
    ) -> tuple[list[qm.QueryResponse], dict[int, int]]:
        """Both lists' responses under the user's `key`, and the plain id of each keyed
        term id of the query's."""
        flt = self._filter(query, key)
        sparse, plain_of = query.sparse, dict[int, int]()
        if key is not None and sparse.indices:
            # The user's points since sealing hold keyed term ids, older ones plain ids: the
            # query asks for both (they never share an id, `sealing.KEYED_TERM`).
            owner = _Owner(sealing.place(query.tenant_id, query.user_id), sealing.Sealer(key))
            keyed = _keyed_terms(owner, sparse)
            plain_of = dict(_pairs(owner, sparse))
            sparse = SparseVec([*sparse.indices, *keyed.indices], [*sparse.values, *keyed.values])
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
        if sparse.indices:
            # IDF over this user's memories, not the whole collection (+0.01 R@10).
            corpus = _owner_filter(query.tenant_id, query.user_id, key)
            idf = None if self.local else qm.IdfCorpusParams(corpus=corpus)
            requests.append(
                qm.QueryRequest(
                    query=qm.SparseVector(indices=sparse.indices, values=sparse.values),
                    using="sparse",
                    filter=flt,
                    limit=query.limit,
                    params=qm.SearchParams(idf=idf) if idf else None,
                    with_payload=True,
                    with_vector=list(_VECTORS),
                )
            )
        responses = await self._call(self.client.query_batch_points(self.collection, requests))
        return list(responses), plain_of

    async def _sealers(self, owners: set[tuple[str, str]]) -> dict[tuple[str, str], _Owner]:
        """Each owner's key, from the table. An owner without one is gone (erased meanwhile;
        a user's key is made with their row): their text is sealed under a key nobody keeps,
        and the erasure's last pass deletes the point."""
        if self.keys is None:
            return {}
        out: dict[tuple[str, str], _Owner] = {}
        for tenant_id, user_id in owners:
            key = await self._call(self.keys.for_write(tenant_id, user_id))
            sealer = sealing.Sealer(key if key is not None else sealing.new_key())
            out[(tenant_id, user_id)] = _Owner(sealing.place(tenant_id, user_id), sealer)
        return out

    async def _opener(
        self,
        tenant_id: str,
        user_id: str,
        key: bytes | None,
        responses: Sequence[qm.QueryResponse],
    ) -> Callable[[qm.ScoredPoint], dict[str, Any] | None]:
        """A function giving a hit's payload with its text opened; None for one that does
        not open (sealed under a key that no longer exists: an erased user's). Every hit is
        the query's user's: one key, `key` from the cache, read again (once a call) if a
        hit does not open."""
        if self.keys is None:
            return lambda p: p.payload or {}
        keys = self.keys
        owner = _Owner(sealing.place(tenant_id, user_id), sealing.Sealer(key) if key else None)
        fresh = False
        opened: dict[str, dict[str, Any] | None] = {}
        for point in (p for r in responses for p in r.points):
            pid = str(point.id)
            if pid in opened:
                continue
            try:
                opened[pid] = _opened(point.payload or {}, owner, pid, user_id)
                continue
            except sealing.SealBroken:
                if not fresh:
                    fresh = True
                    key = await self._call(keys.for_read(tenant_id, user_id, fresh=True))
                    owner = _Owner(owner.place, sealing.Sealer(key) if key else None)
            try:
                opened[pid] = _opened(point.payload or {}, owner, pid, user_id)
            except sealing.SealBroken:
                log.warning("a point of an erased or re-keyed user does not open: %s", pid)
                opened[pid] = None
        return lambda p: opened.get(str(p.id))

    async def count(self) -> int:
        result = await self._call(self.client.count(self.collection, exact=True))
        return int(result.count)

    async def delete_user(self, tenant_id: str, user_id: str) -> int:
        # Their points hold their id as a tag under their key (plain, written before): the
        # erasure deletes them before their key goes with their row, in its last step.
        key = None
        if self.keys is not None:
            key = await self._call(self.keys.for_read(tenant_id, user_id, fresh=True))
            self.keys.forget(tenant_id, user_id)
        flt = _owner_filter(tenant_id, user_id, key)
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


def _owner_filter(tenant_id: str, user_id: str, key: bytes | None) -> qm.Filter:
    """The user's points: their id as a tag under their `key`, or plain (written before)."""
    users = [user_id]
    if key is not None:
        owner = sealing.place(tenant_id, user_id)
        users.append(_tag(sealing.Sealer(key), owner, "user_id", user_id, scope="ids"))
    return qm.Filter(
        must=[
            qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=tenant_id)),
            qm.FieldCondition(key="user_id", match=qm.MatchAny(any=users)),
        ]
    )


def _plain_owner(stored: Mapping[str, Any]) -> tuple[str, str] | None:
    """The owner a point written before names plainly; None for one naming them by tag."""
    user = str(stored.get("user_id"))
    return None if user.startswith(sealing.TAG_PREFIX) else (str(stored.get("tenant_id")), user)


@dataclass(frozen=True, slots=True)
class _Owner:
    """A user's place (`sealing.place(tenant, user)`) and sealer (None: they have no key)."""

    place: bytes
    sealer: sealing.Sealer | None


def _sealed(fields: dict[str, Any], mine: _Owner | None, pid: str) -> dict[str, Any]:
    """`fields` (a payload or a patch) with the user's text sealed under its owner's key,
    bound to the point and field, and the ids filters match as tags under it; unchanged
    without one (an index without `UserKeys`, a patch of neither)."""
    if mine is None:
        return fields
    assert mine.sealer is not None  # `_sealers` makes one for every owner
    out = dict(fields)
    for name in SEALED:
        if name in out:
            where = sealing.within(mine.place, pid, name)
            out[f"{name}_sealed"] = mine.sealer.seal(orjson.dumps(out.pop(name)), where)
    for name in (n for n in TAGGED if n in fields):
        value = fields[name]
        if isinstance(value, list):
            out[name] = [_tag(mine.sealer, mine.place, name, v, scope="ids") for v in value]
        else:  # no session ("") stays as it is
            out[name] = _tag(mine.sealer, mine.place, name, value, scope="ids") if value else value
    if "meta_filter" in out:  # what metadata filters match: tags, not the values
        meta = out["meta_filter"].items()
        out["meta_filter"] = {k: _tag(mine.sealer, mine.place, k, v) for k, v in meta}
    return out


def _tag(
    sealer: sealing.Sealer, owner: bytes, field: str, value: Any, scope: str = "meta_filter"
) -> str:
    """A metadata value (or, `scope` "ids", a user's or session's id) as a filter matches
    it: its tag under the user's key, bound to the field (`filterable`'s key, escaped: any
    text), so equal values of one field match."""
    where = owner + b"/" + sealing.place(scope, field)
    return sealer.tag(orjson.dumps(value), where)


def _opened(payload: Mapping[str, Any], owner: _Owner, pid: str, user_id: str) -> dict[str, Any]:
    """A stored payload of `owner`'s (`user_id`: the query's, the tag stored in its place)
    with its sealed text opened (`SealBroken` if it does not open); plain fields, of a
    point written before sealing, as they are."""
    out = {**payload, "user_id": user_id}
    for name in SEALED:
        token = out.pop(f"{name}_sealed", None)
        if token is None:
            continue
        if owner.sealer is None:
            raise sealing.SealBroken("no key")
        where = sealing.within(owner.place, pid, name)
        out[name] = orjson.loads(owner.sealer.open(token, where))
    return out


def _pairs(owner: _Owner, sparse: SparseVec) -> list[tuple[int, int]]:
    """(keyed id, plain id) of each of the vector's terms."""
    assert owner.sealer is not None
    where = owner.place + b"/sparse"
    return [(owner.sealer.term(i, where), i) for i in sparse.indices]


def _keyed_terms(owner: _Owner, sparse: SparseVec) -> SparseVec:
    """The sparse vector with its term ids keyed under the owner's key (`Sealer.term`):
    a list of words no longer reads them. Two terms keyed alike (one chance in 2^31 a
    pair) add up."""
    weights: dict[int, float] = {}
    for (keyed, _), value in zip(_pairs(owner, sparse), sparse.values, strict=True):
        weights[keyed] = weights.get(keyed, 0.0) + value
    ids = sorted(weights)
    return SparseVec(ids, [weights[i] for i in ids])


def _hit(p: qm.ScoredPoint, payload: Mapping[str, Any], plain_of: Mapping[int, int]) -> VectorHit:
    """A hit; its keyed term ids that are the query's as their plain ids (what recall's
    coverage compares with the query's terms), the others as they are."""
    named = p.vector if isinstance(p.vector, dict) else {}
    dense: Any = named.get("dense")
    turn: Any = named.get("turn")
    sparse = named.get("sparse")
    dense_list = [float(x) for x in dense] if isinstance(dense, list) else []
    vectors = StoredVectors(
        dense=dense_list,
        turn=[float(x) for x in turn] if isinstance(turn, list) else dense_list,
        sparse_ids=[plain_of.get(i, i) for i in sparse.indices]
        if isinstance(sparse, qm.SparseVector)
        else [],
    )
    return VectorHit(uuid.UUID(str(p.id)), p.score, MemoryPayload.from_dict(payload), vectors)
