"""Near-duplicate detection for promotion: which new turns are memories the user already has.

Two memories are the same when their text is (`content_hash`, blind to case, punctuation
and spacing) and they were said in a context that embeds alike (cosine of their indexed
vectors at or above a threshold): "yes" after two different questions stays two memories.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from app.core.chunking import Chunk

_NOT_WORD = re.compile(r"[\W_]+")


def content_hash(text: str) -> str:
    """Of the text with case, punctuation and spacing normalised away."""
    return hashlib.sha256(_NOT_WORD.sub(" ", text.lower()).strip().encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ExistingMemory:
    """A memory of the user with the same text as a new chunk, and its indexed vector
    (None when the index does not hold it: then it is never a merge target)."""

    id: uuid.UUID
    vector: Sequence[float] | None


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A chunk stored as a memory of its own, with the duplicates of it that came in the
    same batch folded in: their sources, and the newest of their times."""

    chunk: Chunk
    vector: list[float]
    sources: list[dict[str, Any]]
    created_at: datetime

    def absorb(self, twin: Chunk) -> NewMemory:
        return replace(
            self,
            sources=[*self.sources, *twin.sources],
            created_at=max(self.created_at, twin.created_at),
        )


@dataclass(frozen=True, slots=True)
class Gain:
    """What an existing memory gains from the batch's duplicates of it; `reason` quotes the
    first of them. Applied later to the row as it then is (`apply_gain`)."""

    sources: list[dict[str, Any]]
    newest_at: datetime
    reason: str

    @classmethod
    def of(cls, chunk: Chunk) -> Gain:
        return cls(list(chunk.sources), chunk.created_at, chunk.content[:200])

    def add(self, chunk: Chunk) -> Gain:
        return replace(
            self,
            sources=[*self.sources, *chunk.sources],
            newest_at=max(self.newest_at, chunk.created_at),
        )


@dataclass(frozen=True, slots=True)
class Plan:
    fresh: list[NewMemory]
    merges: dict[uuid.UUID, Gain]


def plan_batch(
    chunks: Sequence[Chunk],
    vectors: Sequence[Sequence[float]],
    done: AbstractSet[uuid.UUID],
    same_text: Mapping[str, ExistingMemory],
    threshold: float,
) -> Plan:
    """Which chunks become memories and which merge into one already there.

    `vectors[i]` is the indexed vector of `chunks[i]`; `done` holds the ids already stored (a
    replayed batch: those are neither rewritten nor merged again); `same_text` maps a content
    hash to the user's memory with that text. A chunk merges into the first earlier chunk
    of the batch with its text and a cosine >= `threshold`, else into the existing memory
    with its text and such a cosine, else it is new. Looking candidates up by text hash
    keeps this O(batch), not O(batch x memories).
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    fresh: list[NewMemory] = []
    rows: list[int] = []  # the row in `matrix` of each fresh memory
    by_hash: dict[str, list[int]] = {}  # positions in `fresh`
    merges: dict[uuid.UUID, Gain] = {}
    for i, chunk in enumerate(chunks):
        if chunk.id in done:
            continue
        digest = content_hash(chunk.content)
        twin = next(
            (
                k
                for k in by_hash.get(digest, [])
                if _cosine(matrix[rows[k]], matrix[i]) >= threshold
            ),
            None,
        )
        if twin is not None:
            fresh[twin] = fresh[twin].absorb(chunk)
            continue
        prior = same_text.get(digest)
        if (
            prior is not None
            and prior.vector is not None
            and _cosine(np.asarray(prior.vector, dtype=np.float32), matrix[i]) >= threshold
        ):
            gain = merges.get(prior.id)
            merges[prior.id] = gain.add(chunk) if gain else Gain.of(chunk)
            continue
        by_hash.setdefault(digest, []).append(len(fresh))
        rows.append(i)
        fresh.append(NewMemory(chunk, list(vectors[i]), list(chunk.sources), chunk.created_at))
    return Plan(fresh, merges)


@dataclass(frozen=True, slots=True)
class Merged:
    sources: list[dict[str, Any]]
    created_at: datetime


def apply_gain(
    sources: Sequence[dict[str, Any]], created_at: datetime, gain: Gain
) -> Merged | None:
    """A memory's sources and time after a gain: sources it already names (by session and
    seq) are not added twice, and it takes the newest time. None when nothing is new."""
    have = {(s["session_id"], s["seq"]) for s in sources}
    added = [s for s in gain.sources if (s["session_id"], s["seq"]) not in have]
    if not added:
        return None
    return Merged([*sources, *added], max(created_at, gain.newest_at))


def _cosine(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denom if denom else 0.0
