"""Reinforcement written behind recall: the uses of what recall found (and an agent's
feedback) are counted in memory and flushed in batches about once a second, off the
request's path; many recalls of the same memory cost one write and one `reinforced` audit
event (docs/forgetting.md)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from app.core import reinforcement
from app.core.audit import AuditEvent
from app.core.clock import Clock, utc_now
from app.stores import memories as memory_store
from app.stores.db import Database
from app.stores.vectors import PayloadPatch, VectorIndex

log = logging.getLogger("strata.recall")

REINFORCE_FLUSH_SECONDS = 1.0


def _nothing(tenant_id: str, user_id: str, uses: Iterable[reinforcement.Use]) -> None:
    return None


class Reinforcer:
    """Counts uses per user and writes them by a background flusher (started by the first
    count after a quiet spell); `on_written` hears each user's new counts once written."""

    def __init__(
        self,
        db: Database,
        vectors: VectorIndex,
        *,
        clock: Clock = utc_now,
        on_written: Callable[[str, str, Iterable[reinforcement.Use]], None] = _nothing,
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.clock = clock
        self.on_written = on_written
        self._pending: dict[tuple[str, str], _Counts] = {}
        self._flusher: asyncio.Task[None] | None = None

    def reinforce_later(
        self,
        tenant_id: str,
        user_id: str,
        ids: Sequence[uuid.UUID],
        useless: Sequence[uuid.UUID] = (),
    ) -> None:
        """Count a use of each of `ids` (and a useless result for each of `useless`);
        written by the next flush. A failed flush keeps its counts for the one after; it
        never fails the recall that caused it."""
        pending = self._pending.setdefault((tenant_id, user_id), _Counts())
        pending.used.update(ids)
        pending.useless.update(useless)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        # Counts that arrive while a flush runs are written by the next round of this loop.
        while self._pending:
            await asyncio.sleep(REINFORCE_FLUSH_SECONDS)
            if not await self.flush():
                return  # the store is failing: the next recall starts a new flusher

    async def flush(self) -> bool:
        """Write the pending counts, one `reinforced` audit event per memory per flush;
        returns False if some had to be kept for later."""
        pending, self._pending = self._pending, {}
        now = self.clock()
        ok = True
        try:
            while pending:
                (tenant_id, user_id), counts = next(iter(pending.items()))
                try:
                    async with self.db.transaction() as tx:
                        ids = list(set(counts.used) | set(counts.useless))
                        before = await memory_store.lock_use(tx, tenant_id, user_id, ids)
                        new = {mid: _counted(use, counts, mid, now) for mid, use in before.items()}
                        await memory_store.save_use(tx, tenant_id, user_id, new)
                        await memory_store.add_events(
                            tx,
                            [
                                _reinforced(tenant_id, user_id, mid, before[mid], use, counts, now)
                                for mid, use in new.items()
                            ],
                        )
                except Exception:
                    log.warning("reinforcement of %d memories failed", len(counts), exc_info=True)
                    ok = False
                    break  # the store is failing; keep everything for a later flush
                del pending[(tenant_id, user_id)]
                self.on_written(tenant_id, user_id, new.values())
                try:
                    await self.vectors.set_payload(
                        [
                            (
                                mid,
                                PayloadPatch(
                                    access_count=use.access_count,
                                    last_accessed_at=use.last_accessed_at,
                                ),
                            )
                            for mid, use in new.items()
                        ],
                        owner=(tenant_id, user_id),
                    )
                except Exception:  # the rows hold the counts; the index's copy lags a recall
                    log.warning("index update after reinforcement failed", exc_info=True)
        finally:
            # Whatever was not written (failure, cancellation) waits for the next flush.
            for key, counts in pending.items():
                into = self._pending.setdefault(key, _Counts())
                into.used.update(counts.used)
                into.useless.update(counts.useless)
        return ok

    async def drain(self) -> None:
        """Write pending reinforcement now (shutdown, tests)."""
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        await self.flush()


@dataclasses.dataclass(slots=True)
class _Counts:
    """A user's uses not yet written: by memory, how often used and how often useless."""

    used: Counter[uuid.UUID] = dataclasses.field(default_factory=Counter)
    useless: Counter[uuid.UUID] = dataclasses.field(default_factory=Counter)

    def __len__(self) -> int:
        return len(set(self.used) | set(self.useless))


def _counted(
    use: reinforcement.Use, counts: _Counts, mid: uuid.UUID, now: datetime
) -> reinforcement.Use:
    if counts.used[mid]:
        use = reinforcement.after_recalls(use, counts.used[mid], now)
    if counts.useless[mid]:
        use = reinforcement.after_useless(use, counts.useless[mid])
    return use


def _reinforced(
    tenant_id: str,
    user_id: str,
    mid: uuid.UUID,
    old: reinforcement.Use,
    new: reinforcement.Use,
    counts: _Counts,
    now: datetime,
) -> AuditEvent:
    """One event for everything one flush counted of one memory."""
    used, useless = counts.used[mid], counts.useless[mid]
    parts = [f"used {used}×"] if used else []
    if useless:
        parts.append(f"useless {useless}×")
    return AuditEvent(
        tenant_id,
        user_id,
        mid,
        "reinforced",
        old={"access_count": old.access_count, "strength": old.strength},
        new={"access_count": new.access_count, "strength": new.strength},
        reason=", ".join(parts) + " since the last flush",
        at=now,
    )
