"""Hierarchical summaries: raw messages → daily → weekly → essence, per user
(docs/architecture.md, "Summaries").

`summarize` computes a period's inputs and their hash; a summary with that hash is current
and returned as it is. Otherwise the summary is written (by the LLM when one is configured
and its answer holds up, else extractively), indexed as a point of kind `summary`, then
stored under its deterministic id. The hourly sweep finds periods that closed or whose
inputs changed, and enqueues one `summarize` job each.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession

from app.core import periods, summarize, terms
from app.core.periods import Level
from app.core.tokens import TokenCounter
from app.errors import PeriodNotStarted
from app.providers.embeddings import Embedder
from app.providers.llm import LLM, LLMError
from app.schemas.context import SummaryOut
from app.schemas.summaries import SummarizeAccepted, SummaryItem, SummaryPage
from app.services.cursors import encode_cursor, time_and_id
from app.services.ingest import writable
from app.services.job_kinds import JobContext, JobKind, Periodic
from app.stores import jobs as job_store
from app.stores import summaries as summary_store
from app.stores import users as user_store
from app.stores.db import Database
from app.stores.models import Message, Summary
from app.stores.vectors import MemoryPayload, VectorIndex, VectorPoint

log = logging.getLogger("strata.summaries")

SUMMARIZE = "summarize"
SUMMARIES_SWEEP = "summaries_sweep"
# A parent's job found running is waited for this many times this long, then left to the sweep.
PARENT_WAIT_TRIES = 120
PARENT_WAIT_SECONDS = 0.5


class Summarize(BaseModel):
    """The `summarize` job's payload: one (user, level, period); the essence has no day."""

    user_id: str
    level: Level
    period_start: date | None = None  # the local day the period is named by


# An LLM summary may run this much over the level's cap before it is refused.
LLM_CAP_FACTOR = 2
# What a summary is, as a point: dailies and weeklies tell what happened (episodic); the
# essence, who the user is and what lasts (semantic).
MEMORY_TYPE: dict[str, str] = {"daily": "episodic", "weekly": "episodic", "essence": "semantic"}

SYSTEM_PROMPT = """You summarise a user's conversations with an assistant for the
assistant's long-term memory. Write {what} in at most about {words} words, in the language
the conversation mostly uses (Chinese stays Chinese, English stays English). Keep facts,
decisions, plans, preferences, names, dates and numbers; drop greetings and small talk.
Add nothing that the text does not say. Answer with JSON only: {{"summary": "<the summary>"}}"""

WHAT: dict[str, str] = {
    "daily": "a summary of one day's conversation",
    "weekly": "a summary of one week, from the summaries of its days",
    "essence": "the essence of what is known about the user, from weekly summaries",
}


class _Answer(BaseModel):
    summary: str = Field(min_length=1, max_length=20_000)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `summarize` did: the summary (None when the period has no inputs) and whether
    it wrote anything."""

    summary: Summary | None
    changed: bool
    llm_usage: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class _Inputs:
    period_start: datetime
    period_end: datetime
    texts: list[tuple[str | None, str]]  # (speaker, text), in time order
    sources: list[dict[str, Any]]
    source_hash: str


def summary_item(row: Summary) -> SummaryItem:
    return SummaryItem(
        id=row.id,
        level=row.level,
        period_start=row.period_start,
        period_end=row.period_end,
        timezone=row.timezone,
        content=row.content,
        sources=row.sources,
        tokens=row.tokens,
        method=row.method,
        llm_usage=row.llm_usage,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _speaker(m: Message) -> str:
    name = m.metadata_.get("name") if m.metadata_ else None
    return name if isinstance(name, str) and name.strip() else m.role


@dataclass(frozen=True, slots=True)
class SummaryConfig:
    """The settings summaries read (app/settings.py; built in app/wiring.py)."""

    summary_daily_tokens: int  # each level's cap
    summary_weekly_tokens: int
    summary_essence_tokens: int
    summary_essence_weeks: int  # the newest weeklies an LLM essence is written from
    summary_lookback_hours: float  # how far back the sweep looks for received messages
    summary_context_dailies: int  # the dailies and weeklies a context is offered
    summary_context_weeklies: int
    job_max_attempts: int


class SummaryService:
    def __init__(
        self,
        db: Database,
        vectors: VectorIndex,
        embedder: Embedder,
        tokens: TokenCounter,
        llm: LLM | None,
        config: SummaryConfig,
    ) -> None:
        self.db = db
        self.vectors = vectors
        self.embedder = embedder
        self.tokens = tokens
        self.llm = llm
        self.config = config
        self.caps: dict[str, int] = {
            "daily": config.summary_daily_tokens,
            "weekly": config.summary_weekly_tokens,
            "essence": config.summary_essence_tokens,
        }

    # --- the user's clock ---------------------------------------------------------------

    async def timezone(self, tenant_id: str, user_id: str) -> ZoneInfo:
        """The profile's `timezone` (an IANA name); UTC when missing or unknown."""
        async with self.db.read() as tx:
            profile = await summary_store.profile(tx, tenant_id, user_id)
        return periods.zone(profile.get("timezone"))

    # --- one period ---------------------------------------------------------------------

    async def summarize(
        self, tenant_id: str, user_id: str, level: Level, day: date | None
    ) -> Outcome:
        """Bring the summary of `level` for the period of local `day` up to date (the
        essence ignores `day`). Idempotent: unchanged inputs change nothing."""
        tz = await self.timezone(tenant_id, user_id)
        inputs = await self._inputs(tenant_id, user_id, level, day, tz)
        if inputs is None:
            return Outcome(None, False)
        sid = periods.summary_id(tenant_id, user_id, level, inputs.period_start)
        async with self.db.read() as tx:
            existing = await summary_store.get(tx, tenant_id, user_id, sid)
        if existing is not None and existing.source_hash == inputs.source_hash:
            return Outcome(existing, False)

        content, method, usage = await self._write(level, inputs)
        now = datetime.now(UTC)
        values: summary_store.SummaryValues = {
            "id": sid,
            "tenant_id": tenant_id,
            "user_id": user_id,
            "level": level,
            "period_start": inputs.period_start,
            "period_end": inputs.period_end,
            "timezone": tz.key,
            "content": content,
            "sources": inputs.sources,
            "source_hash": inputs.source_hash,
            "tokens": self.tokens([content])[0],
            "method": method,
            "llm_usage": usage,
            "created_at": existing.created_at if existing is not None else now,
            "updated_at": now,
        }
        # The point first, then the row (both keyed by the summary's id): if the row's
        # write fails, its old hash makes the next run write both again; the other way
        # round, a current row could sit on a missing point for good.
        await self.vectors.upsert([await self._point(values)])
        async with self.db.transaction() as tx:
            # A user erased (or being erased) since the inputs were read gets no summary:
            # the erasure may have passed the summaries already (docs/privacy.md).
            live = await user_store.live_for_write(tx, tenant_id, user_id)
            if live:
                row = await summary_store.upsert(tx, values)
                gone = (
                    await summary_store.delete_other_essences(tx, tenant_id, user_id, sid)
                    if level == "essence"
                    else []
                )
        if not live:
            await self.vectors.delete([sid])
            return Outcome(None, False)
        if gone:
            await self.vectors.delete(gone)
        return Outcome(row, True, usage)

    async def _inputs(
        self, tenant_id: str, user_id: str, level: Level, day: date | None, tz: ZoneInfo
    ) -> _Inputs | None:
        if level == "daily":
            assert day is not None
            p = periods.period("daily", day, tz)
            async with self.db.read() as tx:
                rows = await summary_store.messages_between(tx, tenant_id, user_id, p.start, p.end)
            if not rows:
                return None
            return _Inputs(
                p.start,
                p.end,
                [(_speaker(m), m.content) for m in rows],
                [
                    {
                        "session_id": m.session_id,
                        "message_id": m.client_id or f"seq:{m.seq}",
                        "seq": m.seq,
                    }
                    for m in rows
                ],
                periods.source_hash(
                    "daily", [periods.message_part(m.session_id, m.seq) for m in rows]
                ),
            )
        if level == "weekly":
            assert day is not None
            p = periods.period("weekly", day, tz)
            async with self.db.read() as tx:
                children = await summary_store.of_level(
                    tx, tenant_id, user_id, "daily", start=p.start, end=p.end
                )
            start, end = p.start, p.end
        else:
            async with self.db.read() as tx:
                children = await summary_store.of_level(tx, tenant_id, user_id, "weekly")
            if not children:
                return None
            start, end = children[0].period_start, children[-1].period_end
        if not children:
            return None
        return _Inputs(
            start,
            end,
            [(None, c.content) for c in children],
            [
                {"id": str(c.id), "level": c.level, "period_start": c.period_start.isoformat()}
                for c in children
            ],
            periods.source_hash(level, [periods.child_part(c.id, c.source_hash) for c in children]),
        )

    async def _write(self, level: Level, inputs: _Inputs) -> tuple[str, str, dict[str, int] | None]:
        """(content, method, llm usage): the LLM's summary when it holds up, else the
        extractive one. A failed call's usage is still reported."""
        cap = self.caps[level]
        usage: dict[str, int] | None = None
        if self.llm is not None:
            texts = inputs.texts
            if level == "essence":
                texts = texts[-self.config.summary_essence_weeks :]
            try:
                result = await self.llm.complete_json(
                    [
                        {
                            "role": "system",
                            "content": SYSTEM_PROMPT.format(what=WHAT[level], words=cap * 2 // 3),
                        },
                        {"role": "user", "content": _transcript(texts)},
                    ],
                    _Answer,
                    purpose=f"summary.{level}",
                )
            except LLMError as exc:
                log.warning("LLM %s summary failed (%s); extractive instead", level, exc)
            else:
                usage = result.usage.as_dict()
                text = result.value.summary.strip()
                if text and self.tokens([text])[0] <= cap * LLM_CAP_FACTOR:
                    return text, "llm", usage
                log.warning("LLM %s summary empty or over %d tokens; extractive", level, cap)
        return await self._extractive(inputs.texts, cap), "extractive", usage

    async def _extractive(self, texts: Sequence[tuple[str | None, str]], cap: int) -> str:
        sentences = summarize.sentences_of(texts)
        if not sentences:
            return ""
        vectors = await self.embedder.embed([s.text for s in sentences], bulk=True)
        return summarize.extractive(sentences, vectors, cap, self.tokens)

    async def _point(self, v: summary_store.SummaryValues) -> VectorPoint:
        dense = (await self.embedder.embed([v["content"]], bulk=True))[0]
        payload = MemoryPayload(
            tenant_id=v["tenant_id"],
            user_id=v["user_id"],
            session_id=None,
            memory_type=MEMORY_TYPE[v["level"]],
            content=v["content"],
            importance=0.5,
            # Only message refs are `sources` in recall's sense; a weekly's or the
            # essence's children are in the row (GET /v1/users/{id}/summaries).
            sources=v["sources"] if v["level"] == "daily" else [],
            metadata={
                "level": v["level"],
                "period_start": v["period_start"].isoformat(),
                "period_end": v["period_end"].isoformat(),
            },
            # A summary sits at its period's start: `time_range` finds it by its period.
            created_at=v["period_start"],
            kind="summary",
        )
        return VectorPoint(v["id"], dense, terms.document_vector(v["content"]), payload)

    # --- the API ------------------------------------------------------------------------

    async def request(
        self, tenant_id: str, user_id: str, level: Level, day: date | None
    ) -> SummaryItem | SummarizeAccepted:
        """`POST /v1/summarize`: the summary when it is current, else a job that makes it."""
        tz = await self.timezone(tenant_id, user_id)
        now = datetime.now(UTC)
        if level == "essence":
            day = None
        elif day is None:
            day = periods.latest_closed(level, now, tz).first_day
        elif periods.period(level, day, tz).start > now:
            raise PeriodNotStarted(day)
        else:
            day = periods.period(level, day, tz).first_day
        inputs = await self._inputs(tenant_id, user_id, level, day, tz)
        if inputs is not None:
            sid = periods.summary_id(tenant_id, user_id, level, inputs.period_start)
            async with self.db.read() as tx:
                existing = await summary_store.get(tx, tenant_id, user_id, sid)
            if existing is not None and existing.source_hash == inputs.source_hash:
                return summary_item(existing)
        job_id, key, _ = await self.enqueue(tenant_id, user_id, level, day, by_caller=True)
        return SummarizeAccepted(job_id=job_id, key=key)

    async def enqueue(
        self,
        tenant_id: str,
        user_id: str,
        level: Level,
        day: date | None,
        *,
        by_caller: bool = False,
    ) -> tuple[uuid.UUID, str, bool]:
        """The `summarize` job of this period, queued, or queued again if it had finished:
        its key names the period, so a period has one job, re-run when its inputs change.
        Returns (job id, key, queued): not queued when the job is running, perhaps on
        inputs read before this change; the caller may try again once it has ended.
        `by_caller` (a request, not the sweep): the job names the user, so the user's row is
        made if new (export and erasure then find the job), and it is refused while their
        erasure runs."""
        key = periods.job_key(user_id, level, day)
        now = datetime.now(UTC)
        async with self.db.transaction() as tx:
            if by_caller:
                await writable(tx, tenant_id, user_id, now)
            job, _ = await job_store.enqueue(
                tx,
                tenant_id=tenant_id,
                kind=SUMMARIZE,
                key=key,
                payload=Summarize(user_id=user_id, level=level, period_start=day).model_dump(
                    mode="json"
                ),
                due_at=now,
                max_attempts=self.config.job_max_attempts,
                now=now,
            )
            queued = job.state == "queued"
            if job.state in ("succeeded", "failed"):
                queued = await job_store.requeue(tx, job_id=job.id, now=now)
        return job.id, key, queued

    async def asked_for(self, tenant_id: str, user_id: str, level: Level, day: date | None) -> bool:
        """True when this period has a job: someone asked for its summary (`POST
        /v1/summarize`, a session's deletion queueing it again), perhaps before it closed."""
        key = periods.job_key(user_id, level, day)
        async with self.db.read() as tx:
            job = await job_store.find(tx, tenant_id=tenant_id, kind=SUMMARIZE, key=key)
        return job is not None

    async def page(
        self,
        tenant_id: str,
        user_id: str,
        *,
        level: Level | None,
        start_from: datetime | None,
        start_to: datetime | None,
        cursor: str | None,
        limit: int,
    ) -> SummaryPage:
        after = time_and_id(cursor)
        async with self.db.read() as tx:
            rows = await summary_store.page(
                tx,
                tenant_id,
                user_id,
                levels=[level] if level else None,
                start_from=start_from,
                start_to=start_to,
                after=after,
                limit=limit + 1,
            )
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = (
            encode_cursor(rows[-1].period_start.isoformat(), str(rows[-1].id))
            if more and rows
            else None
        )
        return SummaryPage(items=[summary_item(r) for r in rows], next_cursor=next_cursor)

    # --- context ------------------------------------------------------------------------

    async def for_context(
        self, tx: AsyncSession, tenant_id: str, user_id: str, before: datetime
    ) -> list[SummaryOut]:
        """Older periods for a context whose verbatim turns begin at `before`, oldest
        first (the packer keeps the newest): the essence, then weeklies that ended before
        the oldest daily offered, then the dailies that ended by `before`. Read in the
        caller's transaction (context reads the profile in the same one)."""
        s = self.config
        dailies, essence = await summary_store.dailies_and_essence(
            tx, tenant_id, user_id, ended_by=before, dailies=s.summary_context_dailies
        )
        cut = dailies[-1].period_start if dailies else before
        weeklies = await summary_store.before(
            tx, tenant_id, user_id, "weekly", ended_by=cut, limit=s.summary_context_weeklies
        )
        rows = [*([essence] if essence else []), *reversed(weeklies), *reversed(dailies)]
        return [
            SummaryOut(level=r.level, period_start=r.period_start, content=r.content) for r in rows
        ]

    # --- the jobs -----------------------------------------------------------------------

    def jobs(self) -> list[JobKind[Any]]:
        """`summarize` brings one (user, level, period) up to date and, when it changed
        something, queues the level above; the hourly `summaries_sweep` finds the periods
        that closed or whose inputs changed (docs/architecture.md, "Summaries")."""
        return [
            JobKind(SUMMARIZE, Summarize, self._summarize_job),
            JobKind(SUMMARIES_SWEEP, Periodic, self._sweep_job, every=timedelta(hours=1)),
        ]

    async def _summarize_job(self, ctx: JobContext, payload: Summarize) -> dict[str, Any]:
        tenant_id, user_id, level = ctx.tenant_id, payload.user_id, payload.level
        outcome = await self.summarize(tenant_id, user_id, level, payload.period_start)
        result: dict[str, Any] = {"changed": outcome.changed}
        if outcome.summary is None:
            return {**result, "skipped": "the period has nothing to summarise"}
        s = outcome.summary
        result.update(
            id=str(s.id),
            method=s.method,
            tokens=s.tokens,
            period_start=s.period_start.isoformat(),
            llm_usage=outcome.llm_usage,
        )
        parent = periods.PARENT[level]
        if outcome.changed and parent is not None:
            # The level above, once its period has closed, or before if someone asked for
            # it (a weekly of the open week that a session's deletion queued again may
            # have run before this daily was back): a re-run of this job queues it again,
            # which its hash then makes a no-op.
            tz = periods.zone(s.timezone)
            first_day = periods.local_day(s.period_start, tz)
            if parent == "essence":
                result["queued"] = await self._queue_parent(tenant_id, user_id, parent, None)
            else:
                week = periods.week_start(first_day)
                if periods.period(parent, first_day, tz).closed(
                    datetime.now(UTC)
                ) or await self.asked_for(tenant_id, user_id, parent, week):
                    result["queued"] = await self._queue_parent(tenant_id, user_id, parent, week)
        return result

    async def _queue_parent(
        self, tenant_id: str, user_id: str, level: Level, day: date | None
    ) -> str:
        """Queue the parent's job. If it is running, it may have read its inputs before this
        change: wait for it to end and queue it again (the hourly sweep catches the rest)."""
        for _ in range(PARENT_WAIT_TRIES):
            _, key, queued = await self.enqueue(tenant_id, user_id, level, day)
            if queued:
                return key
            await asyncio.sleep(PARENT_WAIT_SECONDS)
        log.warning("summary job %s kept running; the sweep will bring it up to date", key)
        return key

    async def _sweep_job(self, ctx: JobContext, payload: Periodic) -> dict[str, Any]:
        # "Now" is the period's start, not the clock: a re-run decides the same way.
        return dict(await self.sweep(payload.period))

    # --- the sweep ----------------------------------------------------------------------

    async def sweep(self, now: datetime) -> dict[str, int]:
        """Enqueue a `summarize` job for every period that closed by `now` and whose
        summary is missing or behind its inputs: dailies of users with messages received
        in the lookback (closed days and late messages), weeklies of closed weeks whose
        dailies changed, essences behind their weeklies. A level waits for the one below:
        where a daily is enqueued, its job enqueues the weekly after it."""
        since = now - timedelta(hours=self.config.summary_lookback_hours)
        async with self.db.read() as tx:
            touched = await summary_store.users_received_between(tx, since, now)
        counts = {"daily": 0, "weekly": 0, "essence": 0}
        busy_weeks: set[tuple[str, str, date]] = set()
        busy_users: set[tuple[str, str]] = set()
        for t in touched:
            for day in await self._stale_days(t, now):
                await self.enqueue(t.tenant_id, t.user_id, "daily", day)
                counts["daily"] += 1
                busy_weeks.add((t.tenant_id, t.user_id, periods.week_start(day)))
                busy_users.add((t.tenant_id, t.user_id))
        for tenant_id, user_id, monday in await self._stale_weeks(now, since):
            if (tenant_id, user_id, monday) not in busy_weeks:
                await self.enqueue(tenant_id, user_id, "weekly", monday)
                counts["weekly"] += 1
            busy_users.add((tenant_id, user_id))
        for tenant_id, user_id in await self._stale_essences(now):
            if (tenant_id, user_id) not in busy_users:
                await self.enqueue(tenant_id, user_id, "essence", None)
                counts["essence"] += 1
        return counts

    async def _stale_days(self, t: summary_store.Touched, now: datetime) -> list[date]:
        tz = await self.timezone(t.tenant_id, t.user_id)
        days = [
            d
            for d in periods.days_between(t.first_created, t.last_created, tz)
            if periods.period("daily", d, tz).closed(now)
        ]
        if not days:
            return []
        first = periods.period("daily", days[0], tz)
        last = periods.period("daily", days[-1], tz)
        async with self.db.read() as tx:
            refs = await summary_store.message_refs_between(
                tx, t.tenant_id, t.user_id, first.start, last.end
            )
            have = {
                s.period_start: s.source_hash
                for s in await summary_store.of_level(
                    tx, t.tenant_id, t.user_id, "daily", start=first.start, end=last.end
                )
            }
        by_day: dict[date, list[str]] = {}
        for r in refs:
            by_day.setdefault(periods.local_day(r.created_at, tz), []).append(
                periods.message_part(r.session_id, r.seq)
            )
        return [
            d
            for d, parts in sorted(by_day.items())
            if have.get(periods.period("daily", d, tz).start) != periods.source_hash("daily", parts)
        ]

    async def _stale_weeks(self, now: datetime, since: datetime) -> list[tuple[str, str, date]]:
        """Closed weeks with dailies whose weekly is missing or behind them. Dailies of the
        last 15 days: a week's dailies are all written within a day of its close."""
        async with self.db.read() as tx:
            dailies = await summary_store.recent_of_level(tx, "daily", since - timedelta(days=15))
        weeks: dict[tuple[str, str, date], list[Summary]] = {}
        zones: dict[tuple[str, str], ZoneInfo] = {}
        for d in dailies:
            tz = zones.setdefault((d.tenant_id, d.user_id), periods.zone(d.timezone))
            monday = periods.week_start(periods.local_day(d.period_start, tz))
            weeks.setdefault((d.tenant_id, d.user_id, monday), []).append(d)
        stale: list[tuple[str, str, date]] = []
        for (tenant_id, user_id, monday), children in sorted(weeks.items()):
            p = periods.period("weekly", monday, zones[(tenant_id, user_id)])
            if not p.closed(now):
                continue
            expected = periods.source_hash(
                "weekly", [periods.child_part(c.id, c.source_hash) for c in children]
            )
            async with self.db.read() as tx:
                weekly = await summary_store.get(
                    tx,
                    tenant_id,
                    user_id,
                    periods.summary_id(tenant_id, user_id, "weekly", p.start),
                )
            if weekly is None or weekly.source_hash != expected:
                stale.append((tenant_id, user_id, monday))
        return stale

    async def _stale_essences(self, now: datetime) -> list[tuple[str, str]]:
        """Users with a weekly of the last 15 days whose essence is missing or behind."""
        async with self.db.read() as tx:
            recent = await summary_store.recent_of_level(tx, "weekly", now - timedelta(days=15))
        stale: list[tuple[str, str]] = []
        for tenant_id, user_id in sorted({(w.tenant_id, w.user_id) for w in recent}):
            async with self.db.read() as tx:
                weeklies = await summary_store.of_level(tx, tenant_id, user_id, "weekly")
                essences = await summary_store.of_level(tx, tenant_id, user_id, "essence")
            expected = periods.source_hash(
                "essence", [periods.child_part(w.id, w.source_hash) for w in weeklies]
            )
            if not essences or essences[0].source_hash != expected:
                stale.append((tenant_id, user_id))
        return stale


def _transcript(texts: Sequence[tuple[str | None, str]]) -> str:
    return "\n".join(f"{speaker}: {text}" if speaker else text for speaker, text in texts)
