"""The vector index in-process: Qdrant Edge (qdrant-edge-py) on disk, for the embedded mode.

Its calls are synchronous and hold the GIL: writes run in a worker thread, and a recall's
search on the event loop's thread when the shard is free (`_search`). Flags are stored as
integers: Edge 0.9 matched nothing on a boolean `MatchValue(True)`.

An index that stays fast as a user's history grows (bench/HISTORY.md, "Speed at scale"):
without an HNSW graph every search is brute force (dense p50 ~17 ms at 100k points here,
against ~4 ms with the graph), but Edge's `optimize()` holds the shard and the GIL for the
whole build (~4 minutes at 100k): every request of the process would wait. So the graph is
built off to the side: a copy of the flushed shard is optimized in a child process, the
writes made meanwhile are journaled and replayed onto it, and it is swapped in under the
lock. New points land in the shard's small appendable segment, searched brute force, until
enough of them have gathered for the next build: how many is decided by the graph's upkeep
(`app/services/index_upkeep.py`, handed in with `keep_graph`). Which directory is live is
named by `<collection>.current`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast, overload

import numpy as np
import orjson

from app import malloc, mapped
from app.errors import VectorStoreUnavailable
from app.stores.edge_log import start_afresh
from app.stores.loops import TurnLock, running_loop
from app.stores.term_counts import TermCounts, UserKey
from app.stores.turn_rows import TurnRows
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

log = logging.getLogger("strata.index")
T = TypeVar("T")


class QdrantEdgeIndex:
    """Qdrant Edge on disk. One process owns a storage path; calls go through one thread.

    It stores and searches; when its HNSW graph is rebuilt is not its decision. The graph's
    upkeep (`app/services/index_upkeep.py`) hands in a predicate (`keep_graph`), asked
    after each upsert and at open with the points and those written since the last build:
    when it holds, the graph is built in the background (module docstring), and a purge
    builds it in passing. Without one every search stays brute force. The build itself,
    its task (stopped at `close`) and its journal are this class's, as they hold the shard.

    No stored vector leaves the shard on a recall: the query's cosines with each candidate's
    indexed and own-turn vectors are one more search, over the candidates' ids
    (`VectorHit.cosines`; reading ~60 points' vectors back into Python and then arrays cost
    ~2 ms of GIL a recall at 100k memories, profiled). The candidates' payloads and sparse
    terms are kept (up to `vector_cache_bytes`, least recently returned out first): a
    recall's candidates are mostly the same few hundred points of a user, and a payload
    read back costs ~20 µs. Every write drops the entries of the points it touches
    (`upsert`, `delete`; a delete by filter drops them all) or patches them (`set_payload`),
    under the lock.

    The sparse search's IDF over the user's points comes from counts kept here
    (`TermCounts`, counted from the shard at open, then changed with each write under the
    lock): Qdrant counting them per search took ~5.7 ms at 100k memories.

    A recall stage's searches stay one call here (`candidates`): the dense and sparse lists
    in one planned batch that shares a pass over the segments, the cosines and the turn
    comparisons in the same locked call on the shard's thread, rather than a service's
    sequence of calls, each with its hop and its payload reads (bench/native_floor.py
    measures them). Which of them a stage runs is the service's, asked in its `VectorQuery`
    (`with_cosines`, `compare_turns`).
    """

    def __init__(
        self,
        path: Path,
        collection: str,
        dim: int,
        *,
        vector_cache_bytes: int = 0,
        superseded: Sequence[str] = (),
    ) -> None:
        self.root = path
        self.superseded = list(superseded)  # older schemas' collections, removed at open
        self.collection = collection
        self.dim = dim
        self._due: GraphDue = _never  # when to build the graph: the upkeep's (`keep_graph`)
        self._shard: Any = None
        self._lock = threading.Lock()
        self.path = self._live_path()
        self._unbuilt = 0  # points written since the live directory's graph was built
        self._points = 0
        # Writes during a build, each with how many points it writes.
        self._journal: list[tuple[Callable[[Any], None], int]] | None = None
        self._builder: asyncio.Task[None] | None = None
        # The loop the index was opened on (the api's), where its graph builds run: an
        # upsert from the worker's thread (app/worker.py) starts its build there.
        self._home: asyncio.AbstractEventLoop | None = None
        # One graph build or purge at a time, of either loop (a purge is an erasure's job,
        # on the worker's).
        self._rebuilding = TurnLock()
        # `_points` and `_unbuilt`, written by both loops' writes (after `_lock`, if both).
        self._counting = threading.Lock()
        # Erasures (`delete_user`) so far, and how many of them the last purge followed:
        # erasures waiting for one purge are all served by the next.
        self._erasures = 0
        self._purged = 0
        self._purging = False  # what `_child` is doing: a purge, or a graph build
        self._stopped_for_purge = False
        self._child: asyncio.subprocess.Process | None = None
        self.builds = 0
        # Read and written only under `_lock`, as the shard is.
        self._cached: OrderedDict[uuid.UUID, _Stored] = OrderedDict()
        # Each reinforced point's use (`access_count`, `last_accessed_at`), kept here rather
        # than in the shard (`set_payload`), read over the stored payload (`_stored`).
        self._uses: dict[uuid.UUID, PayloadPatch] = {}
        self._cached_max = vector_cache_bytes // _CACHED_BYTES
        # The document frequency of each sparse term among each user's points (under
        # `_lock`); `_terms_stale` after a write that failed part way, until recounted.
        self._terms = TermCounts()
        self._terms_stale = True
        # Each point's `turn` vector, read from a file for the candidates alone (under
        # `_lock`): beside the live directory, so builds and swaps leave it as it is.
        self._turns = TurnRows(self.root / f"{collection}.turn", dim)
        # Points written since the live shard's mapped pages were last let go (`_write`).
        self._written_unreleased = 0
        # A write that failed while a graph was being built is replayed whole onto the
        # copy, which the counts (of the live shard) may then not match: counted again at
        # the swap.
        self._failed_during_build = False

    # ------------------------------------------------------------------ live directory

    @property
    def _pointer(self) -> Path:
        return self.root / f"{self.collection}.current"

    def _live_path(self) -> Path:
        try:
            return self.root / str(json.loads(self._pointer.read_text())["dir"])
        except (OSError, ValueError, KeyError):
            return self.root / self.collection

    def _built_points(self) -> int:
        try:
            return int(json.loads(self._pointer.read_text())["built_points"])
        except (OSError, ValueError, KeyError):
            return 0

    async def ensure_collection(self) -> None:
        self._home = asyncio.get_running_loop()
        await asyncio.to_thread(self._open)
        self._maybe_build()  # a grown index from before this version, or a cut-short build

    def _open(self) -> None:
        import qdrant_edge as qe

        for stale in self.root.glob(f"{self.collection}.gen*"):
            if stale != self.path:  # a build that was cut short (a crash, a stop)
                shutil.rmtree(stale, ignore_errors=True)
        for old in self.superseded:  # rebuilt from SQL into this collection (`reindex`)
            for stale in (self.root / old, *self.root.glob(f"{old}.gen*")):
                shutil.rmtree(stale, ignore_errors=True)
            (self.root / f"{old}.current").unlink(missing_ok=True)
            (self.root / f"{old}.turn").unlink(missing_ok=True)
            log.info("removed the index of an older schema: %s", old)
        if _weighs_by_qdrant_idf(self.path):
            # Written before the term counts: its sparse vector multiplies Qdrant's IDF into
            # every score, which a shard cannot unlearn. It starts empty and the worker's
            # `reindex` fills it from SQL, as after a schema change (a server's collection
            # keeps the modifier, and its name: `app/stores/qdrant_server.py`).
            log.warning("the index at %s predates its own term counts: rebuilt from SQL", self.path)
            shutil.rmtree(self.path, ignore_errors=True)
            self._pointer.unlink(missing_ok=True)
            self.path = self.root / self.collection
            shutil.rmtree(self.path, ignore_errors=True)
        carried_over = not _quantized(self.path)
        self._create_or_load(qe)
        self._points = int(self._shard.count(qe.CountRequest(exact=True)))
        with self._lock:
            self._recount_terms()
            self._turns.open()
            written, zeroed = self._turns.reconcile(self._shard)
            if written or zeroed:
                log.info(
                    "turn vectors: %d rows written from the shard, %d dropped", written, zeroed
                )
            mapped.release(self.path)  # what the load, the count and the rows read whole
        self._unbuilt = max(0, self._points - self._built_points())
        if carried_over:  # written before today's int8 copies: the next build gives them
            self._unbuilt = self._points
        malloc.trim()  # what loading the shard allocated and freed (`_load_trimmed`)

    def _create_or_load(self, qe: Any) -> None:
        if (self.path / "edge_config.json").exists() or any(self.path.glob("segments*")):
            self._shard = _load_with_layout(qe, self.path, self.dim)
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            self._shard = qe.EdgeShard.create(str(self.path), _layout(qe, self.dim))
        # Also on a shard written by an older version: an index added since (`FLOAT_FIELDS`)
        # is built from the payload already stored.
        have = set(self._shard.info().payload_schema)
        wanted = [(name, qe.PayloadSchemaType.Keyword) for name in KEYWORD_FIELDS] + [
            (name, qe.PayloadSchemaType.Float) for name in FLOAT_FIELDS
        ]
        for name, schema in wanted:
            if name not in have:
                self._shard.update(qe.UpdateOperation.create_field_index(name, schema))

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

    async def _search(self, fn: Callable[[], T]) -> T:
        """A search, on the event loop's own thread when the shard is free: Edge's dense
        search holds the GIL for its whole length, so a thread frees the loop for nothing
        while it runs, and the hop there and back costs ~0.15-0.5 ms here (bench/HISTORY.md,
        "A recall's search without a thread hop"). While a write or a graph swap holds the
        shard, it waits in a thread as before: the loop never blocks on the lock; so does
        one that must first count the terms again (~1 s at 100k points, after a failed
        write)."""
        if self._terms_stale or not self._lock.acquire(blocking=False):
            return cast(T, await self._run(fn))
        if self._terms_stale:  # a write failed between the look and the lock
            self._lock.release()
            return cast(T, await self._run(fn))
        try:
            if self._shard is None:
                raise VectorStoreUnavailable("the vector index is closed")
            return fn()
        except VectorStoreUnavailable:
            raise
        except Exception as exc:
            raise VectorStoreUnavailable(str(exc) or type(exc).__name__) from exc
        finally:
            self._lock.release()

    async def upsert(self, points: Sequence[VectorPoint]) -> None:
        import qdrant_edge as qe

        if not points:
            return
        # Built in a thread, not on the event loop: turning ~1,000 floats a point into
        # Edge's vectors held the loop 10-20 ms a promotion pass (a thread yields the GIL
        # every switch interval; the loop's own code never does). Before the shard's lock,
        # so searches do not wait for it; a point that cannot be built fails here, before
        # anything is written or journaled for a graph being built.
        # A conversation's new turns are what its next recalls find: a small write puts
        # them in the payload cache as a read would (the payload through its stored form),
        # so those recalls do not read them back; an import's slice does not push a
        # service's recalled points out of the cache.
        through = self._cached_max > 0 and len(points) <= WRITE_THROUGH_POINTS

        def build() -> tuple[Any, dict[uuid.UUID, _Stored]]:
            op = qe.UpdateOperation.upsert_points([_edge_point(p) for p in points])
            stored = {
                p.id: (MemoryPayload.from_dict(p.payload.to_dict()), tuple(p.sparse.indices))
                for p in (points if through else ())
            }
            return op, stored

        op, stored = await asyncio.to_thread(build)
        terms: dict[uuid.UUID, tuple[UserKey, Sequence[int]] | None] = {
            p.id: ((p.payload.tenant_id, p.payload.user_id), p.sparse.indices) for p in points
        }
        await self._write(
            lambda shard: shard.update(op),
            [p.id for p in points],
            terms=terms,
            stored=stored,
            turns=[p.id for p in points],
        )
        with self._counting:
            self._unbuilt += len(points)
            self._points += len(points)
        self._maybe_build()

    async def delete(self, ids: Sequence[uuid.UUID]) -> None:
        import qdrant_edge as qe

        if ids:
            op = qe.UpdateOperation.delete_points(list(ids))
            await self._write(
                lambda shard: shard.update(op), ids, terms=dict.fromkeys(ids), dropped=ids
            )
            with self._counting:
                self._points = max(0, self._points - len(ids))

    async def set_payload(
        self,
        updates: Sequence[tuple[uuid.UUID, PayloadPatch]],
        *,
        owner: tuple[str, str] | None = None,  # the files are purged: nothing is sealed
    ) -> None:
        import qdrant_edge as qe

        if not updates:
            return
        uses = [(pid, patch) for pid, patch in updates if patch.keys() <= _USE_FIELDS]
        if uses:
            await self._run(self._overlay, uses)
            updates = [(pid, patch) for pid, patch in updates if not patch.keys() <= _USE_FIELDS]
            if not updates:
                return

        # One operation per distinct patch, not per point: a reinforcement flush patches
        # hundreds of points with a handful of distinct counts and one time, and building
        # an operation costs ~12 us of the event loop's time each.
        groups: dict[bytes, tuple[dict[str, Any], list[int | uuid.UUID | str]]] = {}
        for pid, patch in dict(updates).items():  # a point given twice: its last patch
            payload = encode_patch(patch)
            key = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
            groups.setdefault(key, (payload, []))[1].append(pid)
        ops = [
            (payload, ids, qe.UpdateOperation.set_payload(ids, payload))
            for payload, ids in groups.values()
        ]

        def apply(shard: Any) -> None:
            for payload, ids, op in ops:
                try:
                    shard.update(op)
                except Exception as exc:
                    if "No point with id" not in str(exc):
                        raise
                    # One of them was deleted meanwhile: the others one at a time.
                    for pid in ids:
                        try:
                            shard.update(qe.UpdateOperation.set_payload([pid], payload))
                        except Exception as one:
                            if "No point with id" not in str(one):
                                raise

        await self._write(apply, patched=updates)

    def _overlay(self, uses: Sequence[tuple[uuid.UUID, PayloadPatch]]) -> None:
        """Keep a reinforcement (a patch of the use fields alone) beside the shard (under
        `_lock`). Patching a point of a built segment makes Qdrant copy it whole into the
        appendable segment: its original vectors read from disk (faulted into memory with
        their neighbours) and the point out of the graph and the int8 copies until the next
        build. A reinforcement flush patches hundreds of points a second under recall load:
        at 100k memories, 300 recalls moved 3,000 points and faulted 175 MiB of vectors in.
        The uses are read back from SQL at open (`load_uses`), so none is lost."""
        for pid, patch in uses:
            self._uses[pid] = {**self._uses.get(pid, {}), **patch}
            cached = self._cached.get(pid)
            if cached is not None:
                self._cached[pid] = (patched_payload(cached[0], patch), cached[1])

    def load_uses(self, uses: Iterable[tuple[uuid.UUID, int, datetime | None]]) -> None:
        """The memories' use as SQL holds it (at open, before any search): what `_overlay`
        kept before a restart, and what older releases wrote into the shard."""
        with self._lock:
            self._uses = {
                pid: PayloadPatch(access_count=count, last_accessed_at=last)
                for pid, count, last in uses
            }
            self._cached.clear()

    def _filter(self, q: VectorQuery) -> Any:
        import qdrant_edge as qe

        must: list[Any] = []
        for key, value in scope_conditions(q):
            match = qe.MatchAny(list(value)) if isinstance(value, tuple) else qe.MatchValue(value)
            must.append(qe.FieldCondition(key, match=match))
        if q.created_from is not None or q.created_to is not None:
            must.append(
                qe.FieldCondition(
                    "created_at", range=qe.RangeFloat(gte=q.created_from, lte=q.created_to)
                )
            )
        # A point without `valid_to` matches no range, so only ended facts are excluded.
        must_not: list[Any] = []
        if q.valid_at is not None:
            must_not.append(qe.FieldCondition("valid_to", range=qe.RangeFloat(lte=q.valid_at)))
        return qe.Filter(must=must, must_not=must_not or None)

    async def candidates(self, query: VectorQuery) -> CandidateLists:
        import qdrant_edge as qe

        flt = self._filter(query)
        requests = [
            qe.QueryRequest(
                limit=query.limit,
                query=qe.Query.Nearest(query.dense, using="dense"),
                filter=flt,
                # Neither payloads nor vectors: the payloads come from the cache or one read
                # after the search (`_stored`), the cosines from a search over the hits.
                with_payload=False,
                with_vector=False,
            )
        ]

        def search() -> tuple[list[list[Any]], list[list[uuid.UUID]], dict[int, _Found]]:
            batch = list(requests)
            if query.sparse.indices:
                # IDF over this user's memories, not the whole shard (+0.01 R@10), from
                # the counts kept here, read under the same lock as the shard.
                if self._terms_stale:
                    self._recount_terms()
                indices, values = self._terms.weigh(
                    (query.tenant_id, query.user_id), query.sparse.indices, query.sparse.values
                )
                if indices:
                    batch.append(
                        qe.QueryRequest(
                            limit=query.limit,
                            query=qe.Query.Nearest(
                                qe.SparseVector(indices, values), using="sparse"
                            ),
                            filter=flt,
                            with_payload=False,
                        )
                    )
            # One planned batch: both lists share a pass over the segments.
            lists = self._shard.query_batch(qe.QueryBatchRequest(batch))
            # Each point's id read once: Edge builds a new `uuid.UUID` at each read (~1 us).
            ids = [[_as_uuid(p.id) for p in points] for points in lists]
            return lists, ids, self._found(query, lists, ids)

        lists, ids, found = await self._search(search)
        hits: list[list[VectorHit]] = []
        for points, listed_ids in zip(lists, ids, strict=True):
            listed = []
            for p, pid in zip(points, listed_ids, strict=True):
                known = found.get(pid.int)
                if known is not None:  # gone between the search and the read: skipped
                    payload, vectors, cosines, similar = known
                    listed.append(VectorHit(pid, p.score, payload, vectors, cosines, similar))
            hits.append(listed)
        return CandidateLists(hits[0], hits[1] if len(hits) > 1 else [])

    def _found(
        self, query: VectorQuery, lists: list[list[Any]], listed: list[list[uuid.UUID]]
    ) -> dict[int, _Found]:
        """What each point of `lists` (their ids: `listed`) carries (under `_lock`): its
        payload and terms (a point gone since the search has none), and when asked the
        query's cosines with its vectors and its similar turns. By the id's `int`, and in
        lists in the order of the ids: a `uuid.UUID` hashes in Python, and ~1,500 of them a
        recall (by the dicts of each step) were ~5% of its CPU, profiled."""
        first: dict[int, uuid.UUID] = {}
        for listed_ids in listed:
            for pid in listed_ids:
                first.setdefault(pid.int, pid)
        ids = list(first.values())
        if not ids:
            return {}
        stored = self._stored_at(ids)
        # The candidates' turn rows, read once for the cosines and the comparisons.
        turns = self._turns.read_at(ids) if query.with_cosines else None
        cosines: list[tuple[float, float] | None] = [None] * len(ids)
        if turns is not None:
            dense = {pid.int: p.score for pid, p in zip(listed[0], lists[0], strict=True)}
            cosines = self._cosines(query.dense, ids, dense, turns)
        similar: list[Mapping[uuid.UUID, float] | None] = [None] * len(ids)
        if query.compare_turns is not None:
            compare = query.compare_turns
            asked = [None if known is None else compare(known[0]) for known in stored]
            similar = self._similar_at(asked, ids, turns)
        return {
            pid.int: (known[0], StoredVectors((), (), known[1]), cosines[i], similar[i])
            for i, (pid, known) in enumerate(zip(ids, stored, strict=True))
            if known is not None
        }

    def _cosines(
        self, query: list[float], ids: list[uuid.UUID], dense: dict[int, float], turns: _Rows
    ) -> list[tuple[float, float] | None]:
        """The query's cosine with each point's `dense` and `turn` vectors, in the order of
        `ids` (under `_lock`): `dense` from the dense list's scores (`dense`, by the id's
        `int`) and one search over the ids it did not score, in the shard; `turn` from the
        points' rows (`turns`), computed here. A point neither scored (none was seen to be
        left out; this keeps such a point from scoring as cosine 0) has its vectors read
        back from the shard and compared here."""
        import qdrant_edge as qe

        unscored = [pid for pid in ids if pid.int not in dense]
        if unscored:
            found = self._shard.query(
                qe.QueryRequest(
                    limit=len(unscored),
                    query=qe.Query.Nearest(query, using="dense"),
                    filter=qe.Filter(must=[qe.HasIdCondition(set(unscored))]),
                    # Not `exact`: over a handful of ids the search is a scan of the
                    # int8 copies, which an exact one would bypass for the originals
                    # on disk (faulting them into memory).
                    with_payload=False,
                    with_vector=False,
                )
            )
            dense = {**dense, **{_as_uuid(p.id).int: p.score for p in found}}
        at, vectors = turns
        turn: list[float | None] = [None] * len(ids)
        for i, cosine in zip(at, _turn_cosines(query, vectors), strict=True):
            turn[i] = cosine
        out: list[tuple[float, float] | None] = [None] * len(ids)
        for i, pid in enumerate(ids):
            d, t = dense.get(pid.int), turn[i]
            if d is not None and t is not None:
                out[i] = (d, t)
        missing = [pid for pid, pair in zip(ids, out, strict=True) if pair is None]
        if missing:
            back = self._cosines_read_back(query, missing)
            out = [
                back.get(pid) if pair is None else pair for pid, pair in zip(ids, out, strict=True)
            ]
        return out

    def _cosines_read_back(self, query: list[float], ids: list[uuid.UUID]) -> _Cosines:
        """`_cosines` from the stored vectors themselves (under `_lock`)."""
        q = np.asarray(query, dtype=np.float64)
        q /= max(float(np.linalg.norm(q)), 1e-12)
        out = {}
        for r in self._shard.retrieve(ids, with_payload=False, with_vector=["dense", "turn"]):
            named = r.vector if isinstance(r.vector, dict) else {}
            pair = []
            for name in ("dense", "turn"):
                v = np.asarray(named.get(name) or (), dtype=np.float64)
                norm = float(np.linalg.norm(v)) if len(v) == len(q) else 0.0
                pair.append(float(v @ q) / norm if norm > 0 else 0.0)
            out[_as_uuid(r.id)] = (pair[0], pair[1])
        return out

    def _stored(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, _Stored]:
        """`_stored_at` by id, of the points the shard holds."""
        return {
            pid: known
            for pid, known in zip(ids, self._stored_at(ids), strict=True)
            if known is not None
        }

    def _stored_at(self, ids: list[uuid.UUID]) -> list[_Stored | None]:
        """Each point's payload and sparse terms (None: not in the shard), from the cache or
        read once (under `_lock`)."""
        out: list[_Stored | None] = []
        missing: list[int] = []
        for pid in ids:
            known = self._cached.get(pid)
            if known is None:
                missing.append(len(out))
            else:
                self._cached.move_to_end(pid)
            out.append(known)
        if missing:
            where = {ids[i].int: i for i in missing}
            records = self._shard.retrieve(
                [ids[i] for i in missing], with_payload=True, with_vector=["sparse"]
            )
            keep = self._cached_max > 0
            for r in records:
                pid = _as_uuid(r.id)
                payload = MemoryPayload.from_dict(r.payload or {})
                if (use := self._uses.get(pid)) is not None:
                    payload = patched_payload(payload, use)
                known = (payload, tuple(_terms(r)))
                out[where[pid.int]] = known
                if keep:
                    self._cached[pid] = known
            while len(self._cached) > self._cached_max:
                self._cached.popitem(last=False)
        return out

    def _similar_turns(
        self, asked: dict[uuid.UUID, float], ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, Mapping[uuid.UUID, float]]:
        """`_similar_at` by id, of the points in `asked`."""
        similar = self._similar_at([asked.get(pid) for pid in ids], ids)
        return {pid: found for pid, found in zip(ids, similar, strict=True) if found is not None}

    def _similar_at(
        self, asked: list[float | None], ids: list[uuid.UUID], turns: _Rows | None = None
    ) -> list[Mapping[uuid.UUID, float] | None]:
        """For each point of `ids` that `asked` gives a cosine (in the same order), the
        other points of `ids` whose turn vector has a cosine with its own of at least that,
        with that cosine (under `_lock`), from the points' rows (`TurnRows`; `turns`, when
        read already). Recall asks this of the few hits that state a change and of the
        conversation's turns a rewrite read."""
        out: list[Mapping[uuid.UUID, float] | None] = [None] * len(ids)
        if len(ids) < 2 or all(floor is None for floor in asked):
            return out
        at, vectors = turns or self._turns.read_at(ids)
        if len(at) < len(ids):  # no row (`TurnRows`): the shard's own vectors
            at, vectors = self._with_shard_turns(ids, at, vectors)
        column = [-1] * len(ids)
        for m, i in enumerate(at):
            column[i] = m
        present = [i for i, floor in enumerate(asked) if floor is not None and column[i] >= 0]
        if not present:
            return out
        own = [column[i] for i in present]
        floors = [cast(float, asked[i]) for i in present]
        compared = _Compared([ids[i] for i in at], vectors, own, floors)
        for row, (i, m) in enumerate(zip(present, own, strict=True)):
            out[i] = _Similar(compared, row, m)
        return out

    def _with_shard_turns(self, ids: list[uuid.UUID], at: list[int], vectors: Any) -> _Rows:
        """The rows of `ids` at `at` with the shard's own `turn` vectors for the points
        without one (under `_lock`)."""
        rows = dict(zip(at, vectors, strict=True))
        where = {pid.int: i for i, pid in enumerate(ids) if i not in rows}
        for r in self._shard.retrieve(
            [ids[i] for i in where.values()], with_payload=False, with_vector=["turn"]
        ):
            vector = r.vector.get("turn") if isinstance(r.vector, dict) else None
            if vector:
                rows[where[_as_uuid(r.id).int]] = np.asarray(vector, np.float32).astype(np.float16)
        at = sorted(rows)
        matrix = np.asarray([rows[i] for i in at], dtype=np.float16)
        return at, matrix.reshape(len(at), self.dim)

    def _terms_of(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[UserKey, list[int]]]:
        """The owner and sparse terms of the points among `ids` the shard holds (under
        `_lock`)."""
        records = self._shard.retrieve(ids, with_payload=_OWNER, with_vector=["sparse"])
        return {_as_uuid(r.id): _owner_and_terms(r) for r in records}

    def _recount_terms(self) -> None:
        """Count every point's terms anew (under `_lock`): at open, and after a write
        that failed part way. User by user through the payload index, reading the sparse
        vectors only: ~0.9 s at 100k points (2.9 s reading each point's owner from its
        payload, which also mapped ~50 MiB more of the payload files)."""
        import qdrant_edge as qe

        self._terms.clear()
        self._terms_stale = True
        everyone = 1 << 31
        tenants = self._shard.facet(qe.FacetRequest("tenant_id", limit=everyone, exact=True))
        for tenant in tenants.hits:
            of_tenant = qe.FieldCondition("tenant_id", match=qe.MatchValue(tenant.value))
            users = self._shard.facet(
                qe.FacetRequest(
                    "user_id", limit=everyone, exact=True, filter=qe.Filter(must=[of_tenant])
                )
            )
            for user in users.hits:
                owner = (str(tenant.value), str(user.value))
                flt = qe.Filter(
                    must=[of_tenant, qe.FieldCondition("user_id", match=qe.MatchValue(user.value))]
                )
                offset: Any = None
                while True:
                    records, offset = self._shard.scroll(
                        qe.ScrollRequest(
                            offset=offset,
                            limit=2048,
                            filter=flt,
                            with_payload=False,
                            with_vector=["sparse"],
                        )
                    )
                    for r in records:
                        self._terms.add(owner, _terms(r))
                    if offset is None:
                        break
        self._terms_stale = False

    async def count(self) -> int:
        import qdrant_edge as qe

        return int(await self._run(lambda: self._shard.count(qe.CountRequest(exact=True))))

    async def delete_user(self, tenant_id: str, user_id: str) -> int:
        import qdrant_edge as qe

        flt = qe.Filter(
            must=[
                qe.FieldCondition("tenant_id", match=qe.MatchValue(tenant_id)),
                qe.FieldCondition("user_id", match=qe.MatchValue(user_id)),
            ]
        )

        def count_and_delete() -> int:
            # One locked call: no upsert of ours slips between the count and the delete.
            self._erasures += 1  # the next purge must follow it, points or none
            found = int(self._shard.count(qe.CountRequest(exact=True, filter=flt)))
            if found:
                op = qe.UpdateOperation.delete_points_by_filter(flt)
                erased = self._ids_of(flt)  # their `turn` rows are zeroed too
                try:
                    self._shard.update(op)
                except BaseException:
                    self._terms_stale = True  # perhaps some deleted: counted again
                    self._failed_during_build |= self._journal is not None
                    raise
                finally:
                    # A graph being built on a copy from before gets the erasure too, even
                    # one that failed part way here: it is retried, and must not come back.
                    if self._journal is not None:
                        self._journal.append((lambda shard: shard.update(op), 0))
                    self._cached.clear()
                    self._turns.drop(erased)
                self._terms.drop((tenant_id, user_id))
                with self._counting:
                    self._points = max(0, self._points - found)
                if self._uses:  # the erased points' uses: their ids leave the process too
                    kept = self._shard.retrieve(
                        list(self._uses), with_payload=False, with_vector=False
                    )
                    alive = {_as_uuid(r.id) for r in kept}
                    self._uses = {pid: u for pid, u in self._uses.items() if pid in alive}
            return found

        return int(await self._run(count_and_delete))

    def _ids_of(self, flt: Any) -> list[uuid.UUID]:
        """The ids of the points matching `flt` (under `_lock`)."""
        import qdrant_edge as qe

        out: list[uuid.UUID] = []
        offset: Any = None
        while True:
            records, offset = self._shard.scroll(
                qe.ScrollRequest(
                    offset=offset, limit=4096, filter=flt, with_payload=False, with_vector=False
                )
            )
            out.extend(_as_uuid(r.id) for r in records)
            if offset is None:
                return out

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

    async def _write(
        self,
        fn: Callable[[Any], None],
        touched: Sequence[uuid.UUID] = (),
        *,
        patched: Sequence[tuple[uuid.UUID, PayloadPatch]] = (),
        terms: dict[uuid.UUID, tuple[UserKey, Sequence[int]] | None] | None = None,
        stored: dict[uuid.UUID, _Stored] | None = None,
        turns: Sequence[uuid.UUID] = (),
        dropped: Sequence[uuid.UUID] = (),
    ) -> None:
        """Apply a write to the live shard and, while a graph is being built, journal it
        for the copy (under the same lock, so the copy sees exactly the writes after it).
        `touched`: points whose payload and vectors the write replaces or deletes; their
        cached ones go under the same lock, so no search keeps the old ones. `patched`:
        payload patches, applied to the cached payloads alike (reinforcement patches the
        points recall just returned: dropping them would empty the cache it reads).
        `terms`: each written point's owner and sparse terms after the write (None: deleted),
        so that the term counts move from its old terms, read first, to the new ones.
        `stored`: what the cache holds of written points once the write has succeeded.
        `turns`: written points, whose `turn` rows are read back from the shard once the
        write has succeeded; `dropped`: deleted points, whose rows are zeroed after the
        shard's write, even one that failed. Until a crash between the two is mended by
        the next open (`TurnRows.reconcile`), a point without a row is compared on its
        stored vectors."""

        def forget(ids: Iterable[uuid.UUID]) -> None:
            for pid in ids:
                self._cached.pop(pid, None)

        def locked() -> None:
            with self._lock:
                if self._shard is None:
                    raise VectorStoreUnavailable("the vector index is closed")
                before = self._terms_of(list(terms)) if terms else {}
                try:
                    fn(self._shard)
                except BaseException:
                    # Perhaps applied in part (a patch per point): the cache forgets them,
                    # and a copy being built gets it whole (every write here is idempotent,
                    # and its caller retries it: a delete must not come back at the swap).
                    # The term counts are counted again before the next sparse search.
                    forget([*touched, *(pid for pid, _ in patched)])
                    if terms:
                        self._terms_stale = True
                    if self._journal is not None:
                        self._journal.append((fn, len(turns)))
                        self._failed_during_build = True
                    raise
                finally:
                    self._turns.drop(dropped)
                for pid, written in (terms or {}).items():
                    old = before.get(pid)
                    if old is not None:
                        self._terms.remove(*old)
                    if written is not None:
                        self._terms.add(*written)
                if self._journal is not None:
                    self._journal.append((fn, len(turns)))
                self._turns.copy_from(self._shard, turns)
                self._written_unreleased += len(turns)
                if self._written_unreleased >= RELEASE_AFTER_POINTS:
                    # What the writes left resident: the log, the appendable segment's
                    # vectors and payloads (docs/reliability.md, "Memory at 100k").
                    self._written_unreleased = 0
                    mapped.release(self.path)
                self._cache_written(touched, patched, stored)

        try:
            await asyncio.to_thread(locked)
        except VectorStoreUnavailable:
            raise
        except Exception as exc:
            raise VectorStoreUnavailable(str(exc) or type(exc).__name__) from exc

    def _cache_written(
        self,
        touched: Sequence[uuid.UUID],
        patched: Sequence[tuple[uuid.UUID, PayloadPatch]],
        stored: dict[uuid.UUID, _Stored] | None,
    ) -> None:
        """After a write succeeded, under the index's lock: the caches forget the points it
        replaced or deleted, hold what it stored, and take its payload patches."""
        for pid in touched:  # rewritten from SQL or deleted: its use is in the payload
            self._cached.pop(pid, None)
            self._uses.pop(pid, None)
        if stored:
            self._cached.update(stored)
            while len(self._cached) > self._cached_max:
                self._cached.popitem(last=False)
        for pid, patch in patched:
            cached = self._cached.get(pid)
            if cached is not None:
                self._cached[pid] = (patched_payload(cached[0], patch), cached[1])
            use = {k: v for k, v in patch.items() if k in _USE_FIELDS}
            if use and pid in self._uses:  # the shard's is now the newer one
                self._uses[pid] = {**self._uses[pid], **use}  # type: ignore[typeddict-item]

    # ------------------------------------------------------------------ background build

    def status(self) -> dict[str, Any]:
        """For readiness and the benchmarks: points, points not in the graph, a build on."""
        return {
            "points": self._points,
            "unindexed": self._unbuilt,
            "building": self._builder is not None and not self._builder.done(),
            "builds": self.builds,
        }

    def keep_graph(self, due: GraphDue) -> None:
        """Build the graph in the background whenever `due(points, unbuilt)` holds after an
        upsert or at open, and during a purge (`_rebuild`); checked now too, when open."""
        self._due = due
        self._maybe_build()

    def _build_due(self) -> bool:
        return self._due(self._points, self._unbuilt)

    def _maybe_build(self) -> None:
        if self._shard is None or not self._build_due():
            return
        home = self._home
        if home is not None and home is not running_loop():
            # From the worker's thread: the build is the api loop's task, which `close`
            # (on that loop) cancels and awaits.
            with contextlib.suppress(RuntimeError):  # that loop is closed: closing too
                home.call_soon_threadsafe(self._maybe_build)
            return
        if self._builder is not None and not self._builder.done():
            return
        self._builder = asyncio.create_task(self._build_logged())

    async def _build_logged(self) -> None:
        try:
            async with self._rebuilding:
                if self._build_due():  # a purge that ran first may have built it already
                    await self._rebuild(purge=False)
        except asyncio.CancelledError:
            raise
        except Exception:
            if self._stopped_for_purge:
                log.info("index graph build stopped: a purge builds the graph instead")
            else:
                log.warning("index graph build failed; searches stay brute force", exc_info=True)
        finally:
            self._stopped_for_purge = False

    async def build_now(self) -> None:
        """Build the graph on a copy of the shard in a child process and swap it in."""
        async with self._rebuilding:
            await self._rebuild(purge=False)

    async def purge(self) -> bool:
        """Leave no byte of deleted points in the shard's files (an erasure's last step,
        docs/privacy.md): Edge only marks a deleted point, and its payload stays in the
        segment's pages and in the write-ahead log, both kept across restarts. A child
        process copies the live points into a new shard, with a write-ahead log of its own,
        and builds its graph when the live one had one; it is swapped in as a graph build
        is, and every older directory is deleted. Costs a pass over every point of the
        index (and a graph build, when there was a graph); erasures that wait meanwhile
        share the next purge. True: nothing deleted remains (by then, also of deletes
        other than erasures)."""
        wanted = self._erasures
        child = self._child
        if child is not None and not self._purging and child.returncode is None:
            # A graph build under way, on a copy from before the erasure: its child is
            # stopped (the build then fails cleanly, `_rebuild`), and the purge builds the
            # graph in its stead (`_build_due`), rather than after it.
            self._stopped_for_purge = True
            child.kill()
        async with self._rebuilding:
            if self._purged < wanted:
                await self._rebuild(purge=True)
        return True

    async def _rebuild(self, *, purge: bool) -> None:
        """A copy of the flushed shard made in a child process (its graph built; with
        `purge`, rewritten into a new shard first), the writes made meanwhile replayed
        onto it, swapped in under the lock. Under `_rebuilding`."""
        start = time.perf_counter()
        generation = f"{self.collection}.gen{int(time.time() * 1000)}"
        target = self.root / generation
        # A purge copies the live files to the side (`source`), rewrites them into `target`
        # and deletes the copy; a build optimizes the copy itself.
        source = self.root / f"{generation}.src" if purge else target
        # A purge builds the graph when the live directory has one, or one is due.
        optimize = not purge or self._built_points() > 0 or self._build_due()
        self._purging = purge
        built: Any = None
        try:
            copied, erasures = await asyncio.to_thread(self._copy_live, source)
            await self._run_child(source, target, purge=purge, optimize=optimize)
            if purge:
                await asyncio.to_thread(shutil.rmtree, source, True)
            # The live shard's mapped pages let go first: the built copy's load holds
            # ~200 MiB more at 100k points for its seconds, on top (its int8 copy, its
            # heap, the pages it reads whole; its log is empty, `start_afresh`).
            await self._run(mapped.release, self.path)
            built = await asyncio.to_thread(_load_trimmed, target)
            built_points = copied if optimize else 0  # the points in its graph
            old, old_path = await asyncio.to_thread(
                self._swap_in, built, target, generation, built_points
            )
            await self._retire(old, old_path)
            if purge:
                self._purged = max(self._purged, erasures)
                # Any directory but the live one: a build or purge cut short, the first
                # directory of a shard whose pointer moved on.
                await asyncio.to_thread(self._remove_others)
            else:
                self.builds += 1
            log.info(
                "index %s over %d points in %.1fs; swapped in",
                "purged" if purge else "graph built",
                copied,
                time.perf_counter() - start,
            )
        except BaseException:
            await self._abandon(built, source, target, purge=purge)
            raise
        finally:
            self._child = None

    def _copy_live(self, source: Path) -> tuple[int, int]:
        """The flushed live directory copied to `source`, the journal of writes opened:
        (its points, the erasures it follows)."""
        import qdrant_edge as qe

        with self._lock:
            if self._shard is None:
                raise VectorStoreUnavailable("the vector index is closed")
            self._shard.flush()
            shutil.copytree(self.path, source)
            self._journal = []
            self._failed_during_build = False
            return int(self._shard.count(qe.CountRequest(exact=True))), self._erasures

    async def _run_child(self, source: Path, target: Path, *, purge: bool, optimize: bool) -> None:
        """The build (or the purge's rewrite) in a child process: it holds its process's
        GIL for minutes, so a child, at low priority, leaves the requests served here the
        cores they need."""
        if purge:
            args = ["--rewrite", str(source), str(self.dim), str(target)]
            args += [] if optimize else ["--no-optimize"]
        else:
            args = [str(target), str(self.dim)]
        self._child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app.stores.qdrant_edge", *args
        )
        if await self._child.wait() != 0:
            raise RuntimeError(f"index build exited with {self._child.returncode}")

    def _swap_in(
        self, built: Any, target: Path, generation: str, built_points: int
    ) -> tuple[Any, Path]:
        """The journal replayed onto `built`, which then becomes the live shard: (the old
        shard, its directory). Most of the journal is replayed without the lock; the rest
        under it. What the replay writes is let go as the live shard's writes are
        (`RELEASE_AFTER_POINTS`): the writes of a build's minutes, ~100 MiB of pages for
        20k points, stayed resident until the next release, at the top of an import's RSS.
        `built` is not live yet, so nothing else calls into it meanwhile."""
        replayed = 0
        while True:
            with self._lock:
                assert self._journal is not None
                pending, self._journal = self._journal, []
                if not pending:
                    old, self._shard = self._shard, built
                    old_path, self.path = self.path, target
                    self._journal = None
                    self._pointer.with_suffix(".tmp").write_text(
                        json.dumps({"dir": generation, "built_points": built_points})
                    )
                    os.replace(self._pointer.with_suffix(".tmp"), self._pointer)
                    with self._counting:
                        self._unbuilt = max(0, self._points - built_points)
                    if self._failed_during_build:
                        self._terms_stale = True
                        self._failed_during_build = False
                    return old, old_path
            for fn, points in pending:
                fn(built)
                replayed += points
                if replayed >= RELEASE_AFTER_POINTS:
                    replayed = 0
                    mapped.release(target)

    async def _retire(self, old: Any, old_path: Path) -> None:
        """The shard swapped out closed, its memory given back, its directory deleted."""
        await asyncio.to_thread(old.close)
        await asyncio.to_thread(malloc.trim)
        await asyncio.to_thread(shutil.rmtree, old_path, True)

    async def _abandon(self, built: Any, source: Path, target: Path, *, purge: bool) -> None:
        """A build or purge that failed (or was stopped) undone: the journal closed, the
        child stopped, the copies deleted unless already swapped in."""
        with self._lock:
            self._journal = None
        if self._child is not None and self._child.returncode is None:
            self._child.kill()
            await self._child.wait()
        if self.path != target:
            if built is not None:
                await asyncio.to_thread(built.close)
            await asyncio.to_thread(shutil.rmtree, target, True)
        if purge:
            await asyncio.to_thread(shutil.rmtree, source, True)

    def _remove_others(self) -> None:
        for other in (self.root / self.collection, *self.root.glob(f"{self.collection}.gen*")):
            if other != self.path:
                shutil.rmtree(other, ignore_errors=True)

    async def close(self) -> None:
        builder = self._builder
        if builder is not None and not builder.done():
            builder.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await builder

        def shut() -> None:
            with self._lock:
                if self._shard is not None:
                    self._turns.close()
                    self._shard.flush()
                    self._shard.close()
                    self._shard = None

        await asyncio.to_thread(shut)


_OWNER = ["tenant_id", "user_id"]


def _owner_and_terms(record: Any) -> tuple[UserKey, list[int]]:
    payload = record.payload or {}
    owner = (str(payload.get("tenant_id", "")), str(payload.get("user_id", "")))
    return owner, _terms(record)


def _terms(record: Any) -> list[int]:
    vector = record.vector if isinstance(record.vector, dict) else {}
    return list(getattr(vector.get("sparse"), "indices", None) or ())


_Stored = tuple[MemoryPayload, tuple[int, ...]]  # a point's payload and sparse terms
# Points written to the live shard between two releases of its mapped pages: an import
# left each written page of the log, the appendable segment's vectors and the payloads
# resident (~200 MiB over the 20k points between two graph builds at 100k).
RELEASE_AFTER_POINTS = 4096
# An upsert of at most this many points (a conversation's promotion pass, a memory written
# by hand) fills the payload cache with them; a larger one (an import's slice) does not.
WRITE_THROUGH_POINTS = 64
_Cosines = dict[uuid.UUID, tuple[float, float]]  # the query's, with `dense` and `turn`
# Where among some ids the points with a turn row are, and the rows (`TurnRows.read_at`).
_Rows = tuple[list[int], Any]
# What a search's hit carries (`_found`): its payload, terms, cosines and similar turns.
_Found = tuple[
    MemoryPayload, StoredVectors, tuple[float, float] | None, Mapping[uuid.UUID, float] | None
]
# What one cached point holds: ~3.1 kB (tracemalloc over 10k points of a user seeded by
# bench/seed.py: the `MemoryPayload` with its text and sources, and its terms).
_CACHED_BYTES = 3072
# The payload fields of a point's use: a patch of these alone is kept beside the shard.
_USE_FIELDS = frozenset({"access_count", "last_accessed_at"})


def patched_payload(payload: MemoryPayload, patch: PayloadPatch) -> MemoryPayload:
    """`payload` as the index holds it after `patch` (`set_payload`): the same fields
    replaced, lists and maps copied so that the cache shares nothing with the caller."""
    fields: dict[str, Any] = dict(patch)
    if "sources" in fields:
        fields["sources"] = [dict(s) for s in fields["sources"]]
    if "metadata" in fields:
        fields["metadata"] = dict(fields["metadata"])
    return dataclasses.replace(payload, **fields)


def _layout(qe: Any, dim: int, *, float16: bool = True) -> Any:
    """How a shard holds its points (bench/HISTORY.md, "Memory of the index"; docs/reliability.md,
    "Memory at 100k").

    The searched `dense` vector is kept as int8 (scalar quantization) in memory and its
    originals on disk. Searches and the cosines recall scores with read the int8 copies
    only (no rescoring): at
    100k memories a loaded shard holds ~100 MiB of vectors instead of ~290, which random
    recalls no longer fault back in, a search is faster (1.0 against 1.8 ms p50), and a
    cosine moves by 0.0007 on average (0.002 at p99), under anything the relevance reads
    (LoCoMo R@10 0.781 → 0.780, the everyday set unchanged). The originals are read by a
    graph build and by the rare read-back (`_cosines_read_back`). Int8 copies exist for
    built segments; the appendable segment (points since the last build) is searched on its
    originals, as before.

    The `turn` vector is compared by id, never searched for neighbours: float16 on disk
    with no HNSW graph and no int8 copy (512 bytes a point of resident memory, 49 MiB at
    100k): recall reads it from a file of its own (`TurnRows`), and the shard's originals
    are the truth that file is mended from. The searched `dense` vector stays float32 on
    disk: float16 made a graph search slower (no half-precision arithmetic on this CPU).

    `float16=False` is the layout a shard written before float16 can take: a stored
    vector's type cannot change, but its graph and quantization can, and the segments
    written from then on (a graph build rewrites them all) take it."""
    int8 = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, always_ram=True)
    return qe.EdgeConfig(
        vectors={
            "dense": qe.EdgeVectorParams(
                size=dim, distance=qe.Distance.Cosine, on_disk=True, quantization_config=int8
            ),
            "turn": qe.EdgeVectorParams(
                size=dim,
                distance=qe.Distance.Cosine,
                on_disk=True,
                hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10000),
                **({"datatype": qe.VectorStorageDatatype.Float16} if float16 else {}),
            ),
        },
        # No IDF modifier: the query's terms come weighed by the counts kept beside the
        # shard (`TermCounts`), the IDF over the user's points that Qdrant would compute.
        sparse_vectors={"sparse": qe.EdgeSparseVectorParams()},
    )


def _quantized(path: Path) -> bool:
    """Whether the shard at `path` was written with today's int8 copies (`_layout`): of
    `dense`, and none of `turn`. One written before is rebuilt once after it opens, which
    gives its segments today's (and lets go of an int8 copy of `turn`)."""
    try:
        config = json.loads((path / "edge_config.json").read_text())
        vectors = config["vectors"]
        return "quantization_config" in vectors["dense"] and not vectors["turn"].get(
            "quantization_config"
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return True  # no config (a new or an empty shard): nothing to carry over


def _weighs_by_qdrant_idf(path: Path) -> bool:
    """Whether the shard at `path` was created with Qdrant's IDF modifier on its sparse
    vector (as every shard before the term counts was)."""
    try:
        config = json.loads((path / "edge_config.json").read_text())
        return bool(config["sparse_vectors"]["sparse"].get("modifier") == "idf")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _load_with_layout(qe: Any, path: Path, dim: int) -> Any:
    """Load a shard, giving it today's layout where its stored vectors allow it: the
    `turn` type its config names (a load with another fails only after reading every
    segment), or, without a readable config, each in turn."""
    try:
        stored = json.loads((path / "edge_config.json").read_text())["vectors"]["turn"]
        choices: tuple[bool, ...] = (stored.get("datatype") == "float16",)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        choices = (True, False)
    for float16 in choices:
        try:
            return qe.EdgeShard.load(str(path), _layout(qe, dim, float16=float16))
        except Exception as exc:  # a layout its segments cannot take: the next, or as it is
            log.warning("shard %s keeps its stored layout (%s)", path, exc)
    return qe.EdgeShard.load(str(path))


def _load_trimmed(path: Path) -> Any:
    """Load a shard and give back the heap the load freed: replaying a shard's write-ahead
    log allocates ~33 MiB a dense vector (two here) and frees it, and glibc kept it all
    (bench/HISTORY.md, "The heap a shard's load leaves"). `malloc_trim` releases the GIL."""
    import qdrant_edge as qe

    shard = qe.EdgeShard.load(str(path))
    malloc.trim()
    mapped.release(path)  # the log and pages the load read whole; the shard is not live yet
    return shard


def _never(points: int, unbuilt: int) -> bool:
    """No graph without an upkeep: every search brute force."""
    return False


def _unit_rows(vectors: Any) -> Any:
    """float16 vectors (a matrix's rows) as float64 rows of unit length (a zero vector
    stays zero)."""
    m = np.asarray(vectors, dtype=np.float64).reshape(len(vectors), -1)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms > 0, norms, 1.0)


class _Compared:
    """The turn cosines of a search's compared points (rows) with all its points (columns),
    and whether each is over its row's floor: computed when first read (`_Similar`). Half
    of the recalls read none (no result that may replace another), and the matrix (~50 ×
    ~80 × 512 in float64) was half of the comparisons' ~0.3 ms."""

    __slots__ = ("_cosines", "_floors", "_over", "_own", "_vectors", "column", "ids")

    def __init__(
        self, ids: list[uuid.UUID], vectors: Any, own: list[int], floors: list[float]
    ) -> None:
        self.ids = ids  # the points with a turn vector, one a column (`vectors`' rows)
        self.column = {pid.int: m for m, pid in enumerate(ids)}  # by the id's `int`
        self._vectors, self._own, self._floors = vectors, own, floors  # rows: `own` columns
        self._cosines: Any = None
        self._over: Any = None

    def matrix(self) -> tuple[Any, Any]:
        """(the cosines, whether each is at least its row's floor)."""
        if self._cosines is None:
            matrix = _unit_rows(self._vectors)
            cosines = matrix[self._own] @ matrix.T
            # Thresholded in numpy: a question about now asks this of most hits (~50 ×
            # 100), where a Python test per pair took ~1 ms.
            floors = np.array(self._floors, dtype=cosines.dtype)
            self._over = cosines >= floors[:, None]
            self._cosines = cosines
        return self._cosines, self._over


class _Similar(Mapping[uuid.UUID, float]):
    """One point's `VectorHit.similar`: the other points whose turn cosine with its own is
    over its floor, read from the search's comparisons when asked (`_Compared`): a map of
    every pair over its floor (~1,300 a recall, each hashing two `uuid.UUID`s in Python)
    was ~15% of a recall's CPU, profiled; recall's stages read a few."""

    __slots__ = ("_compared", "_own", "_row")

    def __init__(self, compared: _Compared, row: int, own: int) -> None:
        self._compared, self._row, self._own = compared, row, own  # its row and column

    def _at(self, key: uuid.UUID) -> tuple[Any, int] | None:
        m = self._compared.column.get(key.int)
        if m is None or m == self._own:
            return None
        cosines, over = self._compared.matrix()
        return (cosines, m) if over.item(self._row, m) else None

    def __getitem__(self, key: uuid.UUID) -> float:
        found = self._at(key)
        if found is None:
            raise KeyError(key)
        return cast(float, found[0].item(self._row, found[1]))

    @overload
    def get(self, key: uuid.UUID, /) -> float | None: ...
    @overload
    def get(self, key: uuid.UUID, default: float | T, /) -> float | T: ...
    def get(self, key: uuid.UUID, default: Any = None, /) -> Any:
        """`self[key]`, or `default`: without raising, as recall's stages ask it pair by pair."""
        found = self._at(key)
        return default if found is None else found[0].item(self._row, found[1])

    def __iter__(self) -> Iterator[uuid.UUID]:
        over = self._compared.matrix()[1][self._row].tolist()
        ids = self._compared.ids
        return (pid for m, pid in enumerate(ids) if over[m] and m != self._own)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _turn_cosines(query: list[float], vectors: Any) -> list[float]:
    """The query's cosine with each of `vectors` (rows), in float64."""
    if not len(vectors):
        return []
    q = np.asarray(query, dtype=np.float64)
    m = vectors.astype(np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m)) * max(float(np.linalg.norm(q)), 1e-300)
    scores = (m @ q) / np.where(norms > 0, norms, 1.0)
    out: list[float] = scores.tolist()
    return out


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _optimize(path: str, dim: int) -> None:
    """The child process of a build: optimize the copy at `path`, then flush and close, and
    give it an empty write-ahead log (`start_afresh`: the api's load of the copy then has
    nothing to replay). It opens with today's layout (`_load_with_layout`), so the build
    gives a shard written by an earlier release what that layout adds (the int8 copies)."""
    import qdrant_edge as qe

    with contextlib.suppress(OSError):
        os.nice(10)
    shard = _load_with_layout(qe, Path(path), dim)
    shard.optimize()
    shard.flush()
    shard.close()
    start_afresh(Path(path))


def _rewrite(source: str, dim: int, target: str, *, optimize: bool) -> None:
    """The child process of a purge: every live point of the shard at `source` written
    into a new shard at `target`, with the same layout and payload indexes, its graph
    built when `optimize`; flushed and closed, its own log emptied (`start_afresh`).
    Neither a deleted point nor the source's write-ahead log comes along."""
    import qdrant_edge as qe

    with contextlib.suppress(OSError):
        os.nice(10)
    old = _load_with_layout(qe, Path(source), dim)
    try:  # the stored type of `turn` (`_load_with_layout`); a shard without a config: today's
        config = json.loads((Path(source) / "edge_config.json").read_text())
        float16 = config["vectors"]["turn"].get("datatype", "float16") == "float16"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        float16 = True
    new = qe.EdgeShard.create(target, _layout(qe, dim, float16=float16))
    for name, schema in old.info().payload_schema.items():
        new.update(qe.UpdateOperation.create_field_index(name, schema.data_type))
    offset: Any = None
    while True:
        records, offset = old.scroll(
            qe.ScrollRequest(offset=offset, limit=512, with_payload=True, with_vector=True)
        )
        if records:
            new.update(qe.UpdateOperation.upsert_points([_copied(qe, r) for r in records]))
        if offset is None:
            break
    old.close()
    if optimize:
        new.optimize()
    new.flush()
    new.close()
    start_afresh(Path(target))  # its log held every point just written: nothing to replay


def _copied(qe: Any, record: Any) -> Any:
    vectors = dict(record.vector)
    sparse = vectors.get("sparse")
    if sparse is not None:
        vectors["sparse"] = qe.SparseVector(list(sparse.indices), list(sparse.values))
    return qe.Point(record.id, vectors, record.payload or {})


if __name__ == "__main__":
    if sys.argv[1] == "--rewrite":
        _rewrite(
            sys.argv[2], int(sys.argv[3]), sys.argv[4], optimize="--no-optimize" not in sys.argv
        )
    else:
        _optimize(sys.argv[1], int(sys.argv[2]))


def _edge_point(p: VectorPoint) -> Any:
    import qdrant_edge as qe

    sparse = qe.SparseVector(p.sparse.indices, p.sparse.values)
    return qe.Point(
        p.id, {"dense": p.dense, "turn": p.turn_vector, "sparse": sparse}, p.payload.to_dict()
    )
