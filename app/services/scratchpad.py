"""A session's scratchpad (working memory): one JSON object in the session's buffer,
expiring with it (docs/architecture.md §4).

It is the one thing in Redis the log cannot rebuild, by design: working memory is what the
agent chose to keep at hand for this session, not history. Lost (flushed, expired), it
reads back as `{}`; with Redis down, the routes answer 503 (nothing read or stored), and
context packs without it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

from app.errors import BufferUnavailable, ScratchpadTooLarge
from app.schemas.scratchpad import ScratchpadOut, ScratchpadPut
from app.services.ingest import IngestService
from app.stores.buffer import Buffer

log = logging.getLogger("strata.scratchpad")


class ScratchpadService:
    def __init__(self, ingest: IngestService, buffer: Buffer, *, max_bytes: int) -> None:
        self.ingest = ingest
        self.buffer = buffer
        self.max_bytes = max_bytes

    async def get(self, tenant_id: str, session_id: str, user_id: str) -> ScratchpadOut:
        await self.ingest.get_session(tenant_id, session_id, user_id)  # 404 if not theirs
        data, updated_at = _decode(
            await self.buffer.read_scratchpad(tenant_id, user_id, session_id)
        )
        return self._out(session_id, data, updated_at)

    async def put(self, tenant_id: str, session_id: str, body: ScratchpadPut) -> ScratchpadOut:
        await self.ingest.get_session(tenant_id, session_id, body.user_id)
        size = len(orjson.dumps(body.data))
        if size > self.max_bytes:
            raise ScratchpadTooLarge(size, self.max_bytes)
        now = datetime.now(UTC)
        stored = orjson.dumps({"data": body.data, "updated_at": now.isoformat()})
        await self.buffer.write_scratchpad(tenant_id, body.user_id, session_id, stored)
        return self._out(session_id, body.data, now)

    async def delete(self, tenant_id: str, session_id: str, user_id: str) -> None:
        await self.ingest.get_session(tenant_id, session_id, user_id)
        await self.buffer.drop_scratchpad(tenant_id, user_id, session_id)

    async def working_memory(self, tenant_id: str, user_id: str, session_id: str) -> dict[str, Any]:
        """For context (the session is already checked): `{}` when the buffer fails, so
        that a Redis outage costs the working memory, not the whole context."""
        try:
            raw = await self.buffer.read_scratchpad(tenant_id, user_id, session_id)
        except BufferUnavailable:
            log.warning("buffer unavailable; context without working memory", exc_info=True)
            return {}
        return _decode(raw)[0]

    def _out(
        self, session_id: str, data: dict[str, Any], updated_at: datetime | None
    ) -> ScratchpadOut:
        return ScratchpadOut(
            session_id=session_id, data=data, updated_at=updated_at, ttl_seconds=self.buffer.ttl
        )


def _decode(raw: bytes | None) -> tuple[dict[str, Any], datetime | None]:
    if raw is None:
        return {}, None
    try:
        stored = orjson.loads(raw)
        data, updated_at = stored["data"], datetime.fromisoformat(stored["updated_at"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        # Only this module writes the key; a value it cannot read is treated as lost.
        log.warning("unreadable scratchpad; treated as empty")
        return {}, None
    return (data, updated_at) if isinstance(data, dict) else ({}, None)
