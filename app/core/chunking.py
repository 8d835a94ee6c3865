"""Turning log messages into episodic memories (promotion's chunking policy).

Policy (measured on LoCoMo, see bench/HISTORY.md): one memory per turn. Its `content` and
`sources` are that turn alone, so a result never claims messages it does not show; what
gets *indexed* also carries the turns just before it in the session, because a reply ("yes,
last Tuesday") is found by what it answers: the dense vector blends in the embedding of
the previous `dense_context` turns, the sparse vector their terms, both at a lower weight.
It also carries the turn just after it (`Chunk.after`), at a lower weight still, because
the reply often names what a turn was about ("Wow, your own car shop!"). Each turn is
embedded once, alone, and reused as context by its neighbours. A turn's content, sources
and id never change when later messages arrive; only its index entry does, once, when the
turn after it is promoted (promotion rebuilds that predecessor's point).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.core import importance, ranking

# What of a long turn the encoder reads (`embedding_windows`).
EMBED_WINDOW_CHARS = 2_000
EMBED_MAX_WINDOWS = 4

MEMORY_NAMESPACE = uuid.UUID("6f1c7f6e-56a4-4e8e-9f5b-3a3c1d0d7a11")
INDEXED_ROLES = frozenset({"user", "assistant", "tool"})


@dataclass(frozen=True, slots=True)
class LogMessage:
    session_id: str
    seq: int
    client_id: str | None
    role: str
    content: str
    created_at: datetime
    metadata: dict[str, Any]

    @property
    def speaker(self) -> str:
        name = self.metadata.get("name") if self.metadata else None
        return str(name) if isinstance(name, str) and name.strip() else self.role

    @property
    def line(self) -> str:
        return f"{self.speaker}: {self.content}"


@dataclass(frozen=True, slots=True)
class Chunk:
    id: uuid.UUID
    content: str
    dense_context: list[str]
    sparse_context: list[str]
    sources: list[dict[str, Any]]
    created_at: datetime
    importance: float
    role: str = "user"  # the speaker's role; `content` is "speaker: text"
    after: str | None = None  # the next turn's line, once it is in the log


def memory_id(tenant_id: str, session_id: str, incarnation: str, seq: int) -> uuid.UUID:
    """Deterministic: promoting the same message twice names the same memory. The session's
    `incarnation` (its creation time) keeps a deleted and re-created session id from
    colliding with what its predecessor left anywhere."""
    return uuid.uuid5(MEMORY_NAMESPACE, f"{tenant_id}\x1f{session_id}\x1f{incarnation}\x1f{seq}")


def source_of(message: LogMessage) -> dict[str, Any]:
    return {
        "session_id": message.session_id,
        "message_id": message.client_id or f"seq:{message.seq}",
        "seq": message.seq,
    }


def chunk_turns(
    tenant_id: str,
    incarnation: str,
    context: Sequence[LogMessage],
    new: Sequence[LogMessage],
    *,
    dense_context: int,
    sparse_context: int,
    following: Sequence[LogMessage] = (),
    next_within: int = 0,
    back_within: int | None = None,
) -> list[Chunk]:
    """Chunks for `new` messages; `context` holds the turns just before them and
    `following` those just after them that are already in the log (either may be empty).
    A turn's next turn (`Chunk.after`) is the first indexed message at most `next_within`
    seqs after it (0: none) unless that one asks to be reminded (`ranking.reminds`), and
    with `back_within` its context turns are at most that many seqs before it: a rebuild
    reading that far around a turn finds the same."""
    history = [m for m in context if m.role in INDEXED_ROLES]
    turns = [m for m in new if m.role in INDEXED_ROLES]
    nexts = [*turns[1:], *(m for m in following if m.role in INDEXED_ROLES)]
    chunks: list[Chunk] = []
    for message, after in zip(turns, [*nexts, None], strict=False):
        if after is not None and (
            after.seq - message.seq > next_within or ranking.reminds(after.role, after.content)
        ):
            # A user's question about themself ("Where do I live again?") is not about
            # the turn before it: its words made "我下个月要去柏林出差。" answer it.
            after = None
        near = history
        if back_within is not None:
            near = [
                m
                for m in history[-max(dense_context, sparse_context, 1) :]
                if message.seq - m.seq <= back_within
            ]
        dense_before = near[-dense_context:] if dense_context else []
        sparse_before = near[-sparse_context:] if sparse_context else []
        chunks.append(
            Chunk(
                id=memory_id(tenant_id, message.session_id, incarnation, message.seq),
                content=message.line,
                dense_context=[m.line for m in dense_before],
                sparse_context=[m.line for m in sparse_before],
                sources=[source_of(message)],
                created_at=message.created_at,
                importance=heuristic_importance(message.content),
                role=message.role,
                after=after.line if after is not None else None,
            )
        )
        history.append(message)
    return chunks


def heuristic_importance(text: str) -> float:
    """A turn's intrinsic importance without an LLM (`app.core.importance.intrinsic`)."""
    return importance.intrinsic(text)


def embedding_windows(
    text: str, size: int = EMBED_WINDOW_CHARS, most: int = EMBED_MAX_WINDOWS
) -> list[str]:
    """What of a text the encoder reads: the text itself up to `size` characters; a longer
    one as at most `most` windows of `size`, spread evenly from its start to its end (their
    vectors are averaged). The bundled encoder's cost grows faster than the length
    (measured: 2,000 characters 77 ms, 8,000 characters 0.4 s, 32,000 characters 3 s), so
    one pasted document would hold promotion for seconds; the term vector still indexes
    every word of it."""
    if len(text) <= size:
        return [text]
    count = min(most, -(-len(text) // size))
    span = len(text) - size
    starts = sorted({round(i * span / (count - 1)) for i in range(count)})
    return [text[start : start + size] for start in starts]
