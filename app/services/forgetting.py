"""Ebbinghaus forgetting (docs/forgetting.md): the sweep, restores, and tenants' policies.

The sweep reads live, unpinned memories page by page, asks `app.core.forgetting.decide`
about each, and in one transaction per page re-reads the chosen rows under a lock (a
recall flushed meanwhile may have saved one), tombstones or pins them with an audit event
carrying the values that decided it, and takes the forgotten ones out of the index. Then,
as on a delete, the memories whose index context carried a forgotten turn's words are
rebuilt without them (`Reindexer.rebuild_followers`). Forgotten memories are purged (their
content erased) once the tenant's grace period is over; until then `restore` undoes it.

Summaries live in their own table and are never swept; pinned memories are not read.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from app.core import forgetting
from app.core.audit import AuditEvent
from app.core.clock import Clock, utc_now
from app.errors import MemoryNotForgotten, MemoryNotFound, MemoryPurged
from app.services.job_kinds import JobContext, JobKind, Periodic
from app.services.reindex import Reindexer
from app.stores import forgetting as forget_store
from app.stores import memories as memory_store
from app.stores.db import Database
from app.stores.models import Memory
from app.stores.vectors import PayloadPatch, VectorIndex

log = logging.getLogger("strata.forgetting")

FORGET_SWEEP = "forget_sweep"
PAGE = 500
LISTED = 1000  # a report names at most this many memories; the counts are complete


@dataclass(frozen=True, slots=True)
class ForgettingConfig:
    """The settings forgetting reads (app/settings.py; built in app/wiring.py)."""

    forgetting_enabled: bool  # a tenant's default policy, until it sets its own
    importance_intrinsic_share: float


@dataclass(slots=True)
class SweepReport:
    dry_run: bool
    now: datetime
    examined: int = 0
    forgotten: int = 0
    pinned: int = 0
    purged: int = 0
    skipped_tenants: list[str] = field(default_factory=list)  # forgetting disabled
    items: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "now": self.now.isoformat(),
            "examined": self.examined,
            "forgotten": self.forgotten,
            "pinned": self.pinned,
            "purged": self.purged,
            "skipped_tenants": self.skipped_tenants,
            "items": self.items,
        }


class ForgettingService:
    def __init__(
        self,
        db: Database,
        vectors: VectorIndex,
        reindexer: Reindexer,
        config: ForgettingConfig,
        *,
        clock: Clock = utc_now,
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.reindexer = reindexer
        self.config = config
        self.clock = clock

    def defaults(self) -> forgetting.Policy:
        return forgetting.Policy(enabled=self.config.forgetting_enabled)

    async def policy(self, tenant_id: str) -> forgetting.Policy:
        async with self.db.read() as tx:
            stored = await forget_store.get_policy(tx, tenant_id)
        return self.defaults().with_changes(stored or {})

    async def patch_policy(self, tenant_id: str, changes: dict[str, Any]) -> forgetting.Policy:
        """Merge `changes` into the tenant's policy; only the fields it sets are stored, so
        a later change of a default reaches the fields a tenant never set. A field set to
        None is removed: it follows the default again (as a merge-patch's `null`)."""
        async with self.db.transaction() as tx:
            stored = await forget_store.get_policy(tx, tenant_id) or {}
            stored.update(changes)
            stored = {name: value for name, value in stored.items() if value is not None}
            policy = self.defaults().with_changes(stored)
            await forget_store.put_policy(tx, tenant_id, stored, self.clock())
        return policy

    def sweep_job(self, every: timedelta) -> JobKind[Periodic]:
        """The periodic `forget_sweep`: run under the scheduler's leader lease and keyed by
        the period, so two workers run it once (docs/forgetting.md)."""
        return JobKind(FORGET_SWEEP, Periodic, self._sweep_job, every=every)

    async def _sweep_job(self, ctx: JobContext, payload: Periodic) -> dict[str, Any]:
        # "Now" is the service's clock, not the period: forgetting is about elapsed time,
        # and a re-run after a crash finds the same rows already tombstoned.
        result = (await self.sweep(scheduled=True)).as_dict()
        result["items"] = result["items"][:100]
        return result

    async def sweep(
        self,
        *,
        tenant_id: str | None = None,
        user_id: str | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
        scheduled: bool = False,
    ) -> SweepReport:
        """Forget, pin and purge what the policy says, for one tenant (and user) or all.
        The periodic run (`scheduled`) skips tenants whose policy is disabled; a run asked
        for by the maintenance API applies the thresholds regardless."""
        now = now or self.clock()
        report = SweepReport(dry_run=dry_run, now=now)
        policies: dict[str, forgetting.Policy] = {}
        after: tuple[str, uuid.UUID] | None = None
        while True:
            async with self.db.read() as tx:
                rows = await forget_store.sweep_page(
                    tx, tenant_id=tenant_id, user_id=user_id, after=after, limit=PAGE
                )
            if not rows:
                break
            after = (rows[-1].tenant_id, rows[-1].id)
            by_tenant: dict[str, list[forget_store.SweepRow]] = {}
            for row in rows:
                by_tenant.setdefault(row.tenant_id, []).append(row)
            for tenant, tenant_rows in by_tenant.items():
                if tenant not in policies:
                    policies[tenant] = await self.policy(tenant)
                    if scheduled and not policies[tenant].enabled:
                        report.skipped_tenants.append(tenant)
                if scheduled and not policies[tenant].enabled:
                    continue
                await self._sweep_rows(tenant, tenant_rows, policies[tenant], now, report)
        for tenant, policy in policies.items():
            if scheduled and not policy.enabled:
                continue
            await self._purge(tenant, user_id, policy, now, report)
        return report

    async def dry_run_sample(
        self, tenant_id: str, user_id: str, now: datetime, limit: int
    ) -> tuple[SweepReport, bool]:
        """The sweep's dry run over the user's first `limit` memories in the sweep's own
        order (and its first page of purges), and whether the user has more: bounded, for
        the console, where the full dry run reads every memory of the user."""
        report = SweepReport(dry_run=True, now=now)
        policy = await self.policy(tenant_id)
        async with self.db.read() as tx:
            rows = await forget_store.sweep_page(
                tx, tenant_id=tenant_id, user_id=user_id, after=None, limit=limit + 1
            )
        await self._sweep_rows(tenant_id, rows[:limit], policy, now, report)
        await self._purge(tenant_id, user_id, policy, now, report)
        return report, len(rows) > limit

    def _decisions(
        self,
        tenant_id: str,
        rows: Sequence[Memory | forget_store.SweepRow],
        policy: forgetting.Policy,
        now: datetime,
    ) -> dict[uuid.UUID, forgetting.Decision]:
        share = self.config.importance_intrinsic_share
        out: dict[uuid.UUID, forgetting.Decision] = {}
        for r in rows:
            snapshot = forgetting.Snapshot(
                strength=r.strength,
                access_count=r.access_count,
                importance=forgetting.importance(r.importance, r.access_count, share),
                pinned=r.pinned,
                created_at=r.created_at,
                last_accessed_at=r.last_accessed_at,
                stored_at=r.updated_at,
            )
            out[r.id] = forgetting.decide(snapshot, now, policy)
        return out

    async def _sweep_rows(
        self,
        tenant_id: str,
        rows: list[forget_store.SweepRow],
        policy: forgetting.Policy,
        now: datetime,
        report: SweepReport,
    ) -> None:
        report.examined += len(rows)
        decided = self._decisions(tenant_id, rows, policy, now)
        chosen = [r for r in rows if decided[r.id].verdict != "keep"]
        if not chosen:
            return
        ids = [r.id for r in chosen]
        forgotten: list[Memory] = []
        if report.dry_run:  # read whole for the report (what each memory says), unlocked
            async with self.db.read() as tx:
                locked = await forget_store.unpinned(tx, tenant_id, ids)
        # Services own their transactions here: the tombstone, its audit event and the
        # point's removal commit together or not at all (as `MemoryService.delete`).
        else:
            async with self.db.transaction() as tx:
                locked = await forget_store.unpinned(tx, tenant_id, ids, lock=True)
                decided.update(self._decisions(tenant_id, locked, policy, now))
                forgotten = [r for r in locked if decided[r.id].verdict == "forget"]
                pinned = [r for r in locked if decided[r.id].verdict == "pin"]
                await forget_store.forget(tx, tenant_id, [r.id for r in forgotten], now)
                await forget_store.pin(tx, tenant_id, [r.id for r in pinned], now)
                await memory_store.add_events(
                    tx,
                    [_forgotten(r, decided[r.id], policy, now) for r in forgotten]
                    + [_pinned(r, policy, now) for r in pinned],
                )
                if forgotten:
                    await self.vectors.delete([r.id for r in forgotten])
                if pinned:
                    await self.vectors.set_payload(
                        [(r.id, PayloadPatch(pinned=True)) for r in pinned]
                    )
        verdicts = Counter(decided[r.id].verdict for r in locked)
        report.forgotten += verdicts["forget"]
        report.pinned += verdicts["pin"]
        for r in locked:
            d = decided[r.id]
            if d.verdict != "keep" and len(report.items) < LISTED:
                report.items.append(
                    {
                        "id": str(r.id),
                        "user_id": r.user_id,
                        "action": d.verdict,
                        "content": r.content[:200],
                        **d.values(policy),
                    }
                )
        for row in forgotten:
            try:
                await self.reindexer.rebuild_followers(row, keep_used=True)
            except Exception:  # the tombstone stands; a reindex repairs the neighbours
                log.warning("rebuilding the followers of %s failed", row.id, exc_info=True)

    async def _purge(
        self,
        tenant_id: str,
        user_id: str | None,
        policy: forgetting.Policy,
        now: datetime,
        report: SweepReport,
    ) -> None:
        before = now - timedelta(days=policy.grace_days)
        while True:
            async with self.db.transaction() as tx:
                rows = await forget_store.due_for_purge(
                    tx, tenant_id=tenant_id, user_id=user_id, forgotten_before=before, limit=PAGE
                )
                if not rows:
                    return
                report.purged += len(rows)
                if report.dry_run:
                    return
                await forget_store.purge(tx, tenant_id, [r.id for r in rows], now)
                await memory_store.add_events(
                    tx,
                    [
                        AuditEvent(
                            r.tenant_id,
                            r.user_id,
                            r.id,
                            "purged",
                            old=None,
                            new=None,
                            reason=f"forgotten over {policy.grace_days:g} days ago",
                            at=now,
                        )
                        for r in rows
                    ],
                )
            if len(rows) < PAGE:
                return

    async def restore(self, tenant_id: str, user_id: str, memory_id: uuid.UUID) -> Memory:
        """Undo a forget within the grace period: live, indexed, and its neighbours' index
        context carries its words again."""
        now = self.clock()
        policy = await self.policy(tenant_id)
        async with self.db.transaction() as tx:
            row = await forget_store.lock_any(tx, tenant_id, user_id, memory_id)
            if row is None or (row.deleted_at is not None and row.forgotten_at is None):
                raise MemoryNotFound(memory_id)
            if row.purged_at is not None:
                raise MemoryPurged(memory_id)
            if row.forgotten_at is None:
                raise MemoryNotForgotten(memory_id)
            if row.forgotten_at < now - timedelta(days=policy.grace_days):
                raise MemoryPurged(memory_id)  # due for purge: the next sweep erases it
            forgotten_at = row.forgotten_at
            row = await forget_store.restore(tx, tenant_id, user_id, row.id, now)
            await memory_store.add_events(
                tx,
                [
                    AuditEvent(
                        row.tenant_id,
                        row.user_id,
                        row.id,
                        "restored",
                        old={"forgotten_at": forgotten_at.isoformat()},
                        new=None,
                        reason="restored by API",
                        at=now,
                    )
                ],
            )
        await self.reindexer.rebuild_rows([row])
        await self.reindexer.rebuild_followers(row)
        return row


def _forgotten(
    row: Memory, d: forgetting.Decision, policy: forgetting.Policy, now: datetime
) -> AuditEvent:
    return AuditEvent(
        row.tenant_id,
        row.user_id,
        row.id,
        "forgotten",
        old=None,
        new=d.values(policy),
        reason=f"retention {d.retention:.3f} < {policy.retention_threshold:g} and importance "
        f"{d.importance:.3f} < {policy.importance_threshold:g}",
        at=now,
    )


def _pinned(row: Memory, policy: forgetting.Policy, now: datetime) -> AuditEvent:
    return AuditEvent(
        row.tenant_id,
        row.user_id,
        row.id,
        "updated",
        old={"pinned": False},
        new={"pinned": True},
        reason=f"reinforced {row.strength - 1:g} times (pin_after {policy.pin_after}): permanent",
        at=now,
    )
