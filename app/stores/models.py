"""SQLAlchemy models of the canonical store (PostgreSQL, or SQLite when embedded).

Every row is scoped by `tenant_id`. Times are stored as UTC; `UTCDateTime` keeps them
timezone-aware on SQLite too, so the rest of the code never sees a naive datetime.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from app.core import keys

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out, on every backend."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BigID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(256))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class ApiKey(Base):
    """A credential (docs/security.md): `sk_strata_<id hex>_<secret>`, of which only the
    SHA-256 of the secret is kept. Scopes are a comma-separated subset of read,write,admin."""

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.ForeignKey("tenants.id", ondelete="CASCADE"))
    key_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    name: Mapped[str] = mapped_column(sa.String(128), default="", server_default="")
    scopes: Mapped[str] = mapped_column(sa.String(64), default="read", server_default="read")
    user_id: Mapped[str | None] = mapped_column(sa.String(128))
    rate_limit_per_second: Mapped[float | None] = mapped_column(sa.Float())
    rate_limit_burst: Mapped[int | None] = mapped_column(sa.Integer())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (sa.Index("ix_api_keys_tenant", "tenant_id", "created_at"),)


class User(Base):
    __tablename__ = "users"

    tenant_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    profile: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    max_access_count: Mapped[int] = mapped_column(sa.Integer(), default=0)
    # When promotion last took a slice of this user's backlog (fair turns across users).
    promoted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # Set while the user is being erased (docs/privacy.md): the erasure job's id and its
    # running counts, written in the same transaction as each batch it deletes. Ingest for
    # the user is refused while it is set; the row itself goes last.
    erasure: Mapped[dict[str, Any] | None] = mapped_column(JSONType)


def incarnation(created_at: datetime, user_id: str, ids_by_user: bool) -> str:
    """A session's incarnation, part of its memories' ids (`app.core.chunking.memory_id`):
    its creation time, which keeps a deleted and re-created session id from colliding with
    what its predecessor left; and, for sessions made since they are the user's (migration
    2026_12_06_user_sessions), the user, escaped (`app.core.keys`), so that two users'
    sessions of one id never name the same memory. Older sessions keep their ids as they
    are: promoting their messages again names the memories they have."""
    when = created_at.isoformat()
    return f"{when}/{keys.part(user_id)}" if ids_by_user else when


class Session(Base):
    """Keyed by (tenant, user, session id): a session id is unique within its user."""

    __tablename__ = "sessions"

    tenant_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    user_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    system_prompt: Mapped[str | None] = mapped_column(sa.Text())
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    last_seq: Mapped[int] = mapped_column(sa.BigInteger(), default=0)
    indexed_seq: Mapped[int] = mapped_column(sa.BigInteger(), default=0)
    lease_owner: Mapped[str | None] = mapped_column(sa.String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Per-session promotion backoff: a session whose promotion keeps failing waits until
    # `promote_retry_at` instead of being retried on every pass.
    promote_failures: Mapped[int] = mapped_column(sa.Integer(), default=0, server_default="0")
    promote_retry_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # When promotion last took a slice of this session (fair turns across sessions).
    promoted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # False for sessions older than per-user sessions: see `incarnation`.
    ids_by_user: Mapped[bool] = mapped_column(sa.Boolean(), default=True, server_default=sa.true())

    @property
    def incarnation(self) -> str:
        return incarnation(self.created_at, self.user_id, self.ids_by_user)

    __table_args__ = (
        # The worker's backlog scan: only sessions with unindexed messages are in it.
        sa.Index(
            "ix_sessions_backlog",
            "updated_at",
            postgresql_where=sa.text("last_seq > indexed_seq"),
            sqlite_where=sa.text("last_seq > indexed_seq"),
        ),
    )


class WorkerHeartbeat(Base):
    """A running worker's last sign of life, written after its passes; read by `/readyz`."""

    __tablename__ = "worker_heartbeats"

    owner: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    beat_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)


class Message(Base):
    __tablename__ = "messages"

    tenant_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    user_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    session_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    seq: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True)
    client_id: Mapped[str | None] = mapped_column(sa.String(128))
    role: Mapped[str] = mapped_column(sa.String(16))
    content: Mapped[str] = mapped_column(sa.Text())
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "user_id", "session_id", "client_id"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "user_id", "session_id"],
            ["sessions.tenant_id", "sessions.user_id", "sessions.id"],
            ondelete="CASCADE",
        ),
        # Summaries: a user's messages of a day across sessions, and the hourly sweep's scan
        # of what arrived lately.
        sa.Index("ix_messages_user_created", "tenant_id", "user_id", "created_at"),
        sa.Index("ix_messages_received", "received_at"),
    )


class Memory(Base):
    __tablename__ = "memories"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(128))
    user_id: Mapped[str] = mapped_column(sa.String(128))
    session_id: Mapped[str | None] = mapped_column(sa.String(128))
    memory_type: Mapped[str] = mapped_column(sa.String(16))
    content: Mapped[str] = mapped_column(sa.Text())
    importance: Mapped[float] = mapped_column(sa.Float())
    access_count: Mapped[int] = mapped_column(sa.Integer(), default=0)
    last_accessed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    strength: Mapped[float] = mapped_column(sa.Float(), default=1.0)
    pinned: Mapped[bool] = mapped_column(sa.Boolean(), default=False)
    valid_from: Mapped[datetime | None] = mapped_column(UTCDateTime())
    valid_to: Mapped[datetime | None] = mapped_column(UTCDateTime())
    superseded_by: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid())
    sources: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    content_hash: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Forgotten by the sweep (docs/forgetting.md): `deleted_at` is set too, so every read
    # skips it; restorable until the grace period ends, then purged (content erased).
    forgotten_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    purged_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        sa.Index("ix_memories_user_created", "tenant_id", "user_id", "created_at"),
        sa.Index("ix_memories_user_hash", "tenant_id", "user_id", "content_hash"),
        sa.Index("ix_memories_session", "tenant_id", "user_id", "session_id"),
        sa.Index(
            "ix_memories_forgotten",
            "forgotten_at",
            postgresql_where=sa.text("forgotten_at IS NOT NULL AND purged_at IS NULL"),
            sqlite_where=sa.text("forgotten_at IS NOT NULL AND purged_at IS NULL"),
        ),
        # The profile's current facts (semantic and procedural memories).
        sa.Index("ix_memories_user_type", "tenant_id", "user_id", "memory_type", "created_at"),
        # The forgetting sweep's pages, in key order (app/stores/forgetting.py).
        sa.Index("ix_memories_tenant_id", "tenant_id", "id"),
    )


class ForgettingPolicy(Base):
    """A tenant's forgetting thresholds (`app.core.forgetting.Policy`); no row: defaults."""

    __tablename__ = "forgetting_policies"

    tenant_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    policy: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class MemoryEvent(Base):
    __tablename__ = "memory_events"

    id: Mapped[int] = mapped_column(BigID, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(128))
    user_id: Mapped[str] = mapped_column(sa.String(128))
    memory_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid())
    event: Mapped[str] = mapped_column(sa.String(16))
    old_value: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    new_value: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    reason: Mapped[str | None] = mapped_column(sa.Text())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (sa.Index("ix_memory_events_memory", "tenant_id", "memory_id", "id"),)


class Job(Base):
    """Durable background work: the runner claims due rows under a lease (docs/jobs.md)."""

    __tablename__ = "jobs"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(128))
    kind: Mapped[str] = mapped_column(sa.String(64))
    key: Mapped[str] = mapped_column(sa.String(256))
    state: Mapped[str] = mapped_column(sa.String(16))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    due_at: Mapped[datetime] = mapped_column(UTCDateTime())
    attempts: Mapped[int] = mapped_column(sa.Integer(), default=0)
    max_attempts: Mapped[int] = mapped_column(sa.Integer())
    last_error: Mapped[str | None] = mapped_column(sa.Text())
    lease_owner: Mapped[str | None] = mapped_column(sa.String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        # Idempotency: enqueueing the same (kind, key) twice yields the one job.
        sa.UniqueConstraint("tenant_id", "kind", "key"),
        sa.CheckConstraint("state IN ('queued', 'running', 'succeeded', 'failed')", name="state"),
        # The runner's two scans, each over only the rows it can claim: queued jobs by due
        # time, running jobs by lease expiry (a crashed runner's work).
        sa.Index(
            "ix_jobs_queued",
            "due_at",
            postgresql_where=sa.text("state = 'queued'"),
            sqlite_where=sa.text("state = 'queued'"),
        ),
        sa.Index(
            "ix_jobs_running",
            "lease_expires_at",
            postgresql_where=sa.text("state = 'running'"),
            sqlite_where=sa.text("state = 'running'"),
        ),
        # Housekeeping deletes old succeeded jobs.
        sa.Index(
            "ix_jobs_succeeded",
            "finished_at",
            postgresql_where=sa.text("state = 'succeeded'"),
            sqlite_where=sa.text("state = 'succeeded'"),
        ),
    )


class LeaderLease(Base):
    """Who runs a periodic schedule: one row per schedule, held until `expires_at`."""

    __tablename__ = "leader_leases"

    name: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    owner: Mapped[str] = mapped_column(sa.String(128))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Summary(Base):
    """A user's summary of one period (docs/architecture.md, "Summaries"): daily, weekly or
    the essence, with the inputs it was made from and a hash of them."""

    __tablename__ = "summaries"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(128))
    user_id: Mapped[str] = mapped_column(sa.String(128))
    level: Mapped[str] = mapped_column(sa.String(16))
    period_start: Mapped[datetime] = mapped_column(UTCDateTime())
    period_end: Mapped[datetime] = mapped_column(UTCDateTime())
    timezone: Mapped[str] = mapped_column(sa.String(64))
    content: Mapped[str] = mapped_column(sa.Text())
    sources: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    source_hash: Mapped[str] = mapped_column(sa.String(64))
    tokens: Mapped[int] = mapped_column(sa.Integer())
    method: Mapped[str] = mapped_column(sa.String(16))
    llm_usage: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "user_id", "level", "period_start"),
        sa.CheckConstraint("level IN ('daily', 'weekly', 'essence')", name="level"),
        sa.CheckConstraint("method IN ('extractive', 'llm')", name="method"),
        # The sweep's scan of recent dailies and weeklies.
        sa.Index("ix_summaries_level_period", "level", "period_start"),
    )


class Entity(Base):
    """A node of a user's knowledge graph (docs/facts.md): one row per name, compared
    case-folded (`name_key`)."""

    __tablename__ = "entities"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(128))
    user_id: Mapped[str] = mapped_column(sa.String(128))
    name: Mapped[str] = mapped_column(sa.String(256))
    name_key: Mapped[str] = mapped_column(sa.String(256))
    entity_type: Mapped[str | None] = mapped_column(sa.String(64))
    learned_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (sa.UniqueConstraint("tenant_id", "user_id", "name_key"),)


class Relation(Base):
    """An edge `subject —predicate→ object`, bi-temporal: `valid_from`/`valid_to` say when
    it held in the world, `learned_at`/`retracted_at` when Strata believed it."""

    __tablename__ = "relations"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.String(128))
    user_id: Mapped[str] = mapped_column(sa.String(128))
    subject_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("entities.id", ondelete="CASCADE"))
    predicate: Mapped[str] = mapped_column(sa.String(128))
    object_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("entities.id", ondelete="CASCADE"))
    valid_from: Mapped[datetime | None] = mapped_column(UTCDateTime())
    valid_to: Mapped[datetime | None] = mapped_column(UTCDateTime())
    learned_at: Mapped[datetime] = mapped_column(UTCDateTime())
    retracted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The extracted fact this edge came from: superseding the fact ends the edge too.
    memory_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid())
    sources: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)

    __table_args__ = (
        sa.Index("ix_relations_subject", "tenant_id", "user_id", "subject_id"),
        sa.Index("ix_relations_object", "tenant_id", "user_id", "object_id"),
        sa.Index("ix_relations_memory", "tenant_id", "memory_id"),
    )


class UserKey(Base):
    """A user's data key (docs/privacy.md, "What stays on disk"): the text the Qdrant
    server's payload holds is sealed under it (`app.core.sealing`), and the erasure deletes
    it with the user row, so what the server's files keep of that text no longer opens.
    `sealed_from_start`: made before any point of the user was written, so every point of
    theirs was sealed; false for users that existed before keys did (migration
    2026_12_07_user_keys), whose older points hold their text as it was written."""

    __tablename__ = "user_keys"

    tenant_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    user_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    key: Mapped[bytes] = mapped_column(sa.LargeBinary())
    sealed_from_start: Mapped[bool] = mapped_column(sa.Boolean())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
