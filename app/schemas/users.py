"""A user's data as a whole: the export document and the erasure receipt (docs/privacy.md)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from app.schemas.common import Source
from app.schemas.ingest import MessageOut
from app.schemas.jobs import JobState
from app.schemas.summaries import SummarySource

# The stores an erasure counts, in the receipt's order.
ERASED = (
    "sessions",
    "messages",
    "buffer_keys",
    "index_points",
    "memories",
    "memory_events",
    "summaries",
    "jobs",
    "relations",
    "entities",
)


class ErasureCounts(BaseModel):
    sessions: int = Field(description="session rows deleted (PostgreSQL/SQLite)")
    messages: int = Field(description="message log rows deleted")
    buffer_keys: int = Field(description="Redis keys deleted: session windows and scratchpads")
    index_points: int = Field(description="vector index points deleted (memories, summaries)")
    memories: int = Field(description="memory rows deleted, soft-deleted ones included")
    memory_events: int = Field(description="audit events deleted (they quote the content)")
    summaries: int = Field(description="summary rows deleted")
    jobs: int = Field(description="background jobs about the user deleted")
    relations: int = Field(description="knowledge-graph relations deleted")
    entities: int = Field(description="knowledge-graph entities deleted")

    @classmethod
    def zero(cls) -> ErasureCounts:
        return cls(**dict.fromkeys(ERASED, 0))


class PurgeNotes(BaseModel):
    """Why a store of `PurgedFromDisk` is false, when the purge knows (docs/privacy.md,
    "What stays on disk"); null otherwise."""

    database: str | None = Field(
        default=None,
        description="e.g. a PostgreSQL setting that keeps old WAL (`wal_recycle`), or the "
        "purge turned off (`STRATA_ERASURE_PURGE_DATABASE`)",
    )
    index: str | None = None
    buffer: str | None = Field(
        default=None, description="e.g. a Redis that refuses `CONFIG GET` (managed services)"
    )


class PurgedFromDisk(BaseModel):
    """Per store, whether no byte of what the erasure deleted is left in its files once the
    job succeeded (docs/privacy.md, "What stays on disk")."""

    database: bool = Field(
        default=False,
        description="SQLite (embedded): the file rebuilt from its live rows (VACUUM) and "
        "its write-ahead log emptied; PostgreSQL: the tables that held the user's rows "
        "rewritten (VACUUM FULL) and no WAL segment from before the purge left in pg_wal, "
        "checked; false when it could not be proven (`notes.database` says why)",
    )
    index: bool = Field(
        default=False,
        description="Qdrant Edge (embedded): the shard rewritten without the deleted points, "
        "write-ahead log included; a Qdrant server: false, its files are its own",
    )
    index_text: bool = Field(
        default=False,
        description="no text of the user (memories' content, sources and metadata) can be "
        "read from the index's files: purged with them (`index` true), or, on a Qdrant "
        "server, every point of theirs written sealed under the user's key, which the "
        "erasure deleted with the user row (its bytes leave the database's files with the "
        "rest: `database`). The server keeps their points' ids, vectors, sparse terms and "
        "filter fields until its optimizer vacuums them. False for a user whose points were "
        "written before keys existed (their text was stored plain)",
    )
    buffer: bool = Field(
        default=False,
        description="the embedded buffer holds nothing on disk: true; Redis: its snapshot "
        "(RDB) and append-only file (AOF) rewritten after the erasure, or persistence off; "
        "false when that could not be done or checked (`notes.buffer` says why)",
    )
    notes: PurgeNotes = Field(
        default_factory=PurgeNotes,
        description="why a store's files are not known to be purged, under the field that "
        "is false (e.g. `database`: a server setting to change)",
    )


class ErasureReceipt(BaseModel):
    user_id: str
    job_id: uuid.UUID | None = Field(
        description="the erasure job (`GET /v1/jobs/{job_id}`); null when nothing was held"
    )
    state: JobState = Field(description="`succeeded` once everything is gone")
    counts: ErasureCounts = Field(
        description="what was removed, per store; while the job runs, what it removed so far"
    )
    finished_at: datetime | None
    purged_from_disk: PurgedFromDisk = Field(
        default_factory=PurgedFromDisk,
        description="once `succeeded`: which stores' files no longer hold any byte of what "
        "was deleted; all false while the job runs",
    )


class ExportedMessage(BaseModel):
    seq: int
    id: str | None = Field(description="the client's message id, if it gave one")
    role: str
    content: str
    created_at: datetime
    received_at: datetime
    metadata: dict[str, Any]


class ExportedSession(BaseModel):
    id: str
    system_prompt: str | None
    metadata: dict[str, Any]
    last_seq: int
    indexed_seq: int
    created_at: datetime
    updated_at: datetime
    messages: list[ExportedMessage] = Field(description="the whole log, oldest first")


class ExportedScratchpad(BaseModel):
    data: dict[str, Any] = Field(description="the working memory, free-form")
    updated_at: datetime


class ExportedBuffer(BaseModel):
    session_id: str
    window: list[MessageOut] = Field(description="the recent window held in Redis")
    scratchpad: ExportedScratchpad | None = Field(description="the working memory, if any")


class ExportedEvent(BaseModel):
    id: int
    event: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    reason: str | None
    created_at: datetime


class ExportedMemory(BaseModel):
    id: uuid.UUID
    session_id: str | None
    memory_type: str
    content: str
    importance: float
    pinned: bool
    access_count: int
    last_accessed_at: datetime | None
    strength: float
    valid_from: datetime | None
    valid_to: datetime | None
    superseded_by: uuid.UUID | None
    sources: list[Source]
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = Field(description="set for a forgotten or deleted memory")
    history: list[ExportedEvent] = Field(description="the audit trail, oldest first")


class ExportedSummary(BaseModel):
    id: uuid.UUID
    level: str
    period_start: datetime
    period_end: datetime
    timezone: str
    content: str
    sources: list[Source | SummarySource]
    method: str
    created_at: datetime
    updated_at: datetime


class ExportedJob(BaseModel):
    id: uuid.UUID
    kind: str
    state: JobState
    payload: dict[str, Any]
    result: dict[str, Any] | None
    created_at: datetime
    finished_at: datetime | None


class ExportedUser(BaseModel):
    id: str
    profile: dict[str, Any]
    created_at: datetime


class UserExport(BaseModel):
    """The document `GET /v1/users/{user_id}/export` streams. Its sections come in the
    order `sections` lists; later releases add sections (profile facts, graph), never
    change these."""

    format: int = Field(description="the document's format version")
    user_id: str
    exported_at: datetime
    sections: list[str] = Field(description="the sections that follow, in order")
    user: ExportedUser
    sessions: list[ExportedSession]
    buffer: list[ExportedBuffer]
    memories: list[ExportedMemory]
    summaries: list[ExportedSummary]
    jobs: list[ExportedJob]
