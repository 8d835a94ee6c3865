"""Context assembly: the session's instructions, working memory, profile, summaries,
recalled memories and newest turns, packed into the caller's token budget (docs/architecture.md §4).

The context is a list of sections (`app.core.packing.Section`, built by `layout`),
rendered in this order as headed blocks, one line per item:

    ## Instructions           the system prompt, whole
    ## Working memory         - key: value   (the scratchpad; a string as is, else JSON)
    ## About the user         - key: value   (the profile's attributes)
                              - [since 2024-06-01] fact   (its current facts, newest first)
    ## Earlier, in summary    - [weekly from 2024-06-03] content   (oldest first)
    ## Relevant memories      [2024-06-05]             (a day's line, then its memories)
                              - content   (best first: the days by their best memory)
    ## Recent conversation    speaker: content   (oldest first)

A section without items is not rendered. A memory the profile shows as a fact is not
shown again among the memories. docs/seams.md shows how to add one. A last user
message too long for the budget is shown with its middle elided and reported in
`truncated`; only a system prompt that does not fit is a 422.

Every item but the system prompt is stored data (`packing.set_off`): its lines after the
first are indented and a line opening with `#` is escaped, so no message, memory, summary,
profile entry or scratchpad value can start a line of its own at the margin, or pass for one
of the headings above. The system prompt is the application's own instructions, set by the
caller for the session, and is rendered as given (docs/security.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from app.core import packing, ranking
from app.core.relevance import DEFAULT_MIN_RELEVANCE
from app.core.rewrite import Turn
from app.core.tokens import TokenCounter
from app.errors import TokenBudgetTooSmall
from app.schemas.common import LLMUsage
from app.schemas.context import ContextRequest, ContextResponse, ContextSections, SummaryOut
from app.schemas.ingest import MessageOut, SessionOut
from app.schemas.profile import Profile, ProfileFact
from app.schemas.recall import RecallResult
from app.services.context_cache import ContextCache
from app.services.ingest import IngestService
from app.services.profile import ProfileService
from app.services.recall import RecallService
from app.services.scratchpad import ScratchpadService
from app.services.search import Found, SearchSpec
from app.services.summaries import SummaryService
from app.stores.db import Database

log = logging.getLogger("strata.context")

# Memories fetched for packing, best first: as many as the budget could hold at
# `CONTEXT_TOKENS_PER_MEMORY` each (a LoCoMo memory line averages ~45), between 30 and
# `CONTEXT_TOP_K`; the packer decides how many stay. The best `CONTEXT_ANY_RELEVANCE` come
# whatever their relevance; past them a memory must reach recall's default floor, so that a
# large budget is filled with memories until relevance runs out, and only then with
# summaries (bench/README.md, issue 40: "Evidence in one context call").
CONTEXT_TOP_K = 200
CONTEXT_ANY_RELEVANCE = 30
CONTEXT_TOKENS_PER_MEMORY = 30
# Past recall's best `CONTEXT_SPEAKER_HEAD` (its order kept, as `/v1/recall` ranks them), a
# memory said by someone the question names comes before the memories said by others, each
# part in recall's order (`speaker_first`). Deep in the list the question's words match
# what the others say about that person as well as what the person said; on LoCoMo, past
# rank 30, a memory of the named speaker was ~10x as likely to be evidence (bench/README.md,
# issue 40: "Evidence in one context call").
CONTEXT_SPEAKER_HEAD = 10
# Within what one person said, the name the question gives them tells nothing apart (every
# memory of theirs opens with it) and pulls the search towards what others say about them:
# those memories come in the order a second search, by the question without the name,
# ranks them (`without_names`). On LoCoMo, evidence in one context call went from
# 0.691/0.807/0.870 to 0.699/0.820/0.889 at 1k/2k/4k tokens, for a second search when a
# question names a speaker (bench/README.md, issue 40: "Evidence in one context call").

HEAD_SYSTEM = "## Instructions"
HEAD_WORKING_MEMORY = "## Working memory"
HEAD_PROFILE = "## About the user"
HEAD_SUMMARIES = "## Earlier, in summary"
HEAD_MEMORIES = "## Relevant memories"
HEAD_RECENT = "## Recent conversation"

# Per section, the share of the free budget it may take in its turn, before the sections of
# lower priority are packed; what those leave unused flows back (`STRATA_CONTEXT_SHARES`).
# Recent turns take at most half, so that memories keep room in a long conversation; the
# profile at most a quarter, so that a user's hundred facts (newest first, whatever the
# question) cannot crowd out the memories that answer it.
DEFAULT_SHARES: Mapping[str, float] = {"recent_messages": 0.5, "profile": 0.25}

# The newest turns that come before the memories, within their share: what continuity needs
# (the last few exchanges; `STRATA_CONTEXT_RECENT_TURNS`). Older turns of the session come
# after the memories, before the summaries: a turn the question needs is recalled anyway,
# and is shown once (bench/README.md, issue 40: "Evidence in one context call").
RECENT_TURNS = 10


def layout(
    *,
    system_prompt: str,
    working_memory: Sequence[str] = (),
    profile: Sequence[str] = (),
    summaries: Sequence[str] = (),
    memories: Sequence[str] = (),
    recent: Sequence[str] = (),
    last_user: int | None = None,
    shares: Mapping[str, float] = DEFAULT_SHARES,
    recent_turns: int | None = RECENT_TURNS,
    memory_days: Sequence[str] = (),
    memory_twins: Mapping[int, int] | None = None,
) -> list[packing.Section]:
    """The context's sections from their lines, in the order they are rendered.

    The system prompt and the last user message (`recent[last_user]`) are required. Then,
    by priority: the newest `recent_turns` turns within their share of what is left, the
    working memory, the profile, the memories (best first), the older turns, the summaries.
    Over budget after the exact count, the summaries go first, the turns last. A last user
    message that does not fit keeps its speaker, head and tail, within its section's share.

    `memory_days` (one per memory, e.g. `2024-06-05`) renders the memories under a line per
    day, the days in the order of their best memory, instead of a date on each.
    `memory_twins`: memory index -> the index of the recent turn it is; a turn shown among
    the recent ones is not shown again as a memory.
    """

    def items(lines: Sequence[str]) -> list[packing.Item]:
        return [packing.Item(i, packing.set_off(text)) for i, text in enumerate(lines)]

    def turns(lines: Sequence[str]) -> list[packing.Item]:
        # `speaker: content`: an elided message keeps its speaker.
        shown = [packing.set_off(t) for t in lines]
        return [
            packing.Item(i, t, prefix=t.find(": ") + 2 if ": " in t else 0)
            for i, t in enumerate(shown)
        ]

    section = packing.Section
    sections = [
        section(
            "system_prompt",
            [packing.Item(0, system_prompt)] if system_prompt else [],
            priority=0,
            head=HEAD_SYSTEM,
            whole=True,
        ),
        section(
            "working_memory",
            items(working_memory),
            priority=2,
            head=HEAD_WORKING_MEMORY,
            bullet="- ",
        ),
        section("profile", items(profile), priority=3, head=HEAD_PROFILE, bullet="- "),
        section(
            "summaries",
            items(summaries),
            priority=6,
            head=HEAD_SUMMARIES,
            bullet="- ",
            conversation=True,
        ),
        _memories(memories, memory_days, memory_twins or {}),
        section(
            "recent_messages",
            turns(recent),
            priority=1,
            head=HEAD_RECENT,
            required=last_user,
            conversation=True,
            lead=recent_turns,
            after=5,
        ),
    ]
    return [replace(s, share=shares.get(s.name)) for s in sections]


def _memories(
    lines: Sequence[str], days: Sequence[str], twins: Mapping[int, int]
) -> packing.Section:
    """The memories, chosen best first; with `days`, rendered under a line per day (the days
    in the order of their best memory, each day's memories best first)."""
    order = list(range(len(lines)))
    if days:
        first = {d: n for n, d in reversed(list(enumerate(days)))}
        order.sort(key=lambda n: (first[days[n]], n))
    at = {n: pos for pos, n in enumerate(order)}
    return packing.Section(
        "memories",
        [
            packing.Item(n, packing.set_off(lines[n]), group=f"[{days[n]}]" if days else "")
            for n in order
        ],
        priority=4,
        head=HEAD_MEMORIES,
        bullet="- ",
        fill=[at[n] for n in range(len(lines))],
        twin_of="recent_messages",
        twins={at[n]: turn for n, turn in twins.items()},
    )


def memories_for(budget: int) -> int:
    """How many memories a context of `budget` tokens asks recall for."""
    return max(CONTEXT_ANY_RELEVANCE, min(CONTEXT_TOP_K, budget // CONTEXT_TOKENS_PER_MEMORY))


_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def memory_speaker(r: RecallResult) -> str | None:
    """Who said a memory promoted from a turn (its content is `speaker: text`, the turn's
    name or role); None for a memory written as such (no sources)."""
    if not r.sources:
        return None
    speaker, sep, _ = r.content.partition(": ")
    speaker = speaker.strip()
    if not sep or not speaker or len(speaker) > 64 or "\n" in speaker:
        return None
    return speaker


def named_speakers(memories: Sequence[RecallResult], query: str) -> frozenset[str]:
    """The speakers of `memories` whom the query names (each speaker asked once: a list
    of a hundred memories has a few)."""
    speakers = {s for r in memories if (s := memory_speaker(r)) is not None}
    return frozenset(s for s in speakers if ranking.names_speaker(query, s))


def without_names(query: str, names: Sequence[str]) -> str:
    """The query with each name taken out (as a whole word, with an English possessive;
    a Chinese name wherever it is), its spaces collapsed."""
    for name in names:
        if _CJK.search(name):
            query = query.replace(name, " ")
        else:
            pattern = rf"(?<!\w){re.escape(name)}(?:['’]s)?(?!\w)"
            query = re.sub(pattern, " ", query, flags=re.IGNORECASE)
    return " ".join(query.split())


def speaker_first(
    memories: Sequence[RecallResult],
    query: str,
    head: int = CONTEXT_SPEAKER_HEAD,
    theirs: Sequence[RecallResult] = (),
) -> list[RecallResult]:
    """The first `head` as recall ranked them; after them, the memories said by someone the
    query names, then the rest, each in recall's order. `theirs`, another ranking of the
    named speakers' memories (the question without their names), goes before recall's
    order of them, each memory once. A query that names no speaker (or only speakers of
    none of them, or of all of them) leaves the order as it is."""
    rest = memories[head:]
    named = named_speakers(rest, query)
    if not named:
        return list(memories)
    seen = {r.id for r in memories[:head]}
    first: list[RecallResult] = []
    for r in [*theirs, *rest]:
        if memory_speaker(r) in named and r.id not in seen:
            seen.add(r.id)
            first.append(r)
    return [*memories[:head], *first, *(r for r in rest if memory_speaker(r) not in named)]


def section_names() -> list[str]:
    """The sections a share may be set for (not the system prompt: it is whole)."""
    return [s.name for s in layout(system_prompt="") if not s.whole]


def message_speaker(m: MessageOut) -> str:
    """The turn's name (one line, whatever was stored), or else its role: as a memory
    promoted from it opens (`memory_speaker`)."""
    name = m.metadata.get("name") if m.metadata else None
    return " ".join(name.split()) if isinstance(name, str) and name.strip() else m.role


def message_line(m: MessageOut) -> str:
    return f"{message_speaker(m)}: {m.content}"


def memory_day(r: RecallResult) -> str:
    return r.created_at.date().isoformat()


def entry_line(key: str, value: Any) -> str:
    """One entry of the scratchpad or the profile: strings as they are, the rest as JSON."""
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"{key}: {shown}"


def fact_line(f: ProfileFact) -> str:
    since = f.valid_from or f.created_at
    return f"[since {since.date().isoformat()}] {f.content}"


def summary_line(s: SummaryOut) -> str:
    return f"[{s.level} from {s.period_start.date().isoformat()}] {s.content}"


class ContextService:
    def __init__(
        self,
        db: Database,
        ingest: IngestService,
        recall: RecallService,
        scratchpad: ScratchpadService,
        tokens: TokenCounter,
        *,
        window: int,
        shares: Mapping[str, float] = DEFAULT_SHARES,
        recent_turns: int = RECENT_TURNS,
        summaries: SummaryService | None = None,
        profile: ProfileService | None = None,
        cache: ContextCache | None = None,
    ) -> None:
        unknown = set(shares) - set(section_names())
        if unknown:
            raise ValueError(f"context shares for unknown sections {sorted(unknown)}")
        self.db = db  # the profile's and the summaries' reads share one transaction
        self.ingest = ingest
        self.recall = recall
        self.scratchpad = scratchpad
        self.tokens = tokens
        self.window = window  # newest turns read for packing (the buffer's window)
        self.shares = dict(shares)
        self.recent_turns = recent_turns  # the newest turns packed before the memories
        self.summaries = summaries  # None: no summaries section (a service built without)
        self.profile = profile  # None: no profile section
        self.cache = cache  # None: the profile and the summaries are read on every call

    async def build(self, tenant_id: str, session_id: str, body: ContextRequest) -> ContextResponse:
        """Read the conversation, recall for its last question, add the older periods'
        summaries, pack every section into the budget."""
        session = await self.ingest.get_session(tenant_id, session_id, body.user_id)
        recent, last_user, working_memory = await self._conversation(tenant_id, session, body)

        recalled, profile, summaries = await self._recall_and_read(
            tenant_id, session_id, body, recent, last_user
        )
        attributes = list(profile.attributes.items())

        def pack(memories: list[RecallResult]) -> packing.Packed:
            return self._pack(
                body, session, working_memory, attributes, profile.facts, summaries,
                memories, recent, last_user, session_id,
            )  # fmt: skip

        # A fact the profile shows is not repeated among the memories (the same memory).
        # Packed again, with those the profile could not hold back among the memories, until
        # every one left out is in the profile (once, unless a share is set for the profile:
        # it is packed before the memories, so it holds what they would have).
        hidden = {f.id for f in profile.facts} & {r.id for r in recalled.memories}
        while True:
            memories = [r for r in recalled.memories if r.id not in hidden]
            packed = pack(memories)
            n = len(attributes)
            shown = {profile.facts[i - n].id for i in _keys(packed, "profile") if i >= n}
            if hidden <= shown:
                break
            hidden &= shown

        kept = {name: [item.key for item in items] for name, items in packed.kept.items()}
        cut = set(packed.truncated.get("recent_messages", []))
        kept_memories = [memories[i] for i in sorted(kept["memories"])]  # best first
        # A recalled fact shown in the profile was used as much as one shown as a memory.
        kept_ids = [m.id for m in kept_memories] + sorted(hidden)
        used = [i for i in kept_ids if i in recalled.used]
        if used and body.as_of is None:  # a replay of the past changes nothing
            self.recall.reinforce_later(tenant_id, body.user_id, used)
        return ContextResponse(
            sections=ContextSections(
                system_prompt=session.system_prompt or "",
                working_memory=_kept_entries(working_memory, kept["working_memory"]),
                profile=_kept_profile(attributes, profile.facts, kept["profile"]),
                summaries=[summaries[i] for i in kept["summaries"]],
                memories=kept_memories,
                recent_messages=[
                    recent[item.key].model_copy(
                        update={"content": packing.restore(item.text[item.prefix :])}
                    )
                    if item.key in cut
                    else recent[item.key]
                    for item in packed.kept["recent_messages"]
                ],
            ),
            text=packed.text,
            tokens=packed.tokens,
            token_budget=body.token_budget,
            tokenizer=self.tokens.encoding,
            dropped=packed.dropped,
            truncated={"recent_messages": [recent[i].seq for i in sorted(cut)]} if cut else {},
            rewritten_query=recalled.rewritten_query,
            llm_usage=LLMUsage(**recalled.llm_usage) if recalled.llm_usage else None,
        )

    def _pack(
        self,
        body: ContextRequest,
        session: SessionOut,
        working_memory: dict[str, Any],
        attributes: list[tuple[str, Any]],
        facts: list[ProfileFact],
        summaries: list[SummaryOut],
        memories: list[RecallResult],
        recent: list[MessageOut],
        last_user: int | None,
        session_id: str,
    ) -> packing.Packed:
        """Every section's lines, packed into the budget."""
        sections = layout(
            system_prompt=session.system_prompt or "",
            working_memory=[entry_line(k, v) for k, v in working_memory.items()],
            profile=[*(entry_line(k, v) for k, v in attributes), *(fact_line(f) for f in facts)],
            summaries=[summary_line(x) for x in summaries],
            memories=[r.content for r in memories],
            memory_days=[memory_day(r) for r in memories],
            memory_twins=_twins(memories, recent, session_id),
            recent=[message_line(m) for m in recent],
            last_user=last_user,
            shares=self.shares,
            recent_turns=self.recent_turns,
        )
        try:
            return packing.pack(sections, budget=body.token_budget, count=self.tokens)
        except packing.BudgetTooSmall as exc:
            raise TokenBudgetTooSmall(
                "token_budget",
                f"{body.token_budget} is too small: the system prompt, with the last user "
                f"message cut to its speaker and an ellipsis, needs {exc.needed} tokens",
            ) from exc

    async def _recall_and_read(
        self,
        tenant_id: str,
        session_id: str,
        body: ContextRequest,
        recent: list[MessageOut],
        last_user: int | None,
    ) -> tuple[_Recalled, Profile, list[SummaryOut]]:
        """The recalled memories, the profile and the summaries, read side by side."""
        # The recall (the index and the model; SQL at most every few seconds) runs while the
        # profile and the summaries are read one after the other: the call waits for the
        # slower side, not for the sum, and mostly holds one database connection, as before.
        before = _summaries_before(body, recent)

        async def read() -> tuple[Profile, list[SummaryOut]]:
            async with self.db.read() as tx:  # one transaction: its statements are the cost
                return await self._profile(tx, tenant_id, body), await self._summaries(
                    tx, tenant_id, body, before
                )

        async def stored() -> tuple[Profile, list[SummaryOut]]:
            # Not for a replay, nor without turns (`before` is then now: never asked again).
            if self.cache is None or body.as_of is not None or not recent:
                return await read()
            return await self.cache.get(tenant_id, body.user_id, before, read)

        try:
            async with asyncio.TaskGroup() as reads:
                recalling = reads.create_task(
                    self._recall(tenant_id, session_id, body, recent, last_user)
                )
                reading = reads.create_task(stored())
        except BaseExceptionGroup as group:
            for other in group.exceptions[1:]:
                log.warning("context read failed too: %r", other)
            raise group.exceptions[0] from None  # the API's error handlers expect one error
        profile, summaries = reading.result()
        return recalling.result(), profile, summaries

    async def _conversation(
        self, tenant_id: str, session: SessionOut, body: ContextRequest
    ) -> tuple[list[MessageOut], int | None, dict[str, Any]]:
        """The newest turns, the index of the last user message among them (None if the
        user never spoke), and the working memory."""
        working_memory: dict[str, Any] = {}
        if body.as_of is None:
            recent, working_memory = await asyncio.gather(
                self.ingest.recent(tenant_id, session, self.window),
                self.scratchpad.working_memory(tenant_id, session.user_id, session.id),
            )
        else:  # a replay: the session as it stood then, from the log (the scratchpad has
            # no history, so a replay shows none)
            recent = await self.ingest.recent_until(
                tenant_id, session.user_id, session.id, body.as_of, self.window
            )

        last_user = next(
            (i for i in range(len(recent) - 1, -1, -1) if recent[i].role == "user"), None
        )
        if last_user is None and recent and recent[0].seq > 1:
            # The user spoke before the window (a long run of tool and assistant turns):
            # the last user message is still owed verbatim, ahead of the window.
            earlier = await self.ingest.last_user_message(
                tenant_id, session.user_id, session.id, body.as_of
            )
            if earlier is not None:
                recent = [earlier, *recent]
                last_user = 0
        return recent, last_user, working_memory

    async def _recall(
        self,
        tenant_id: str,
        session_id: str,
        body: ContextRequest,
        recent: list[MessageOut],
        last_user: int | None,
    ) -> _Recalled:
        """Memories for the caller's query, or else for the last user message (rewritten
        when it leans on the turns before it). One that is a recent turn stays: the packer
        shows it once, as a memory only when the turn itself does not fit (`_twins`)."""
        query = body.query or (recent[last_user].content if last_user is not None else None)
        if not query:
            return _Recalled([], None, None)
        spec = SearchSpec(
            tenant_id=tenant_id,
            user_id=body.user_id,
            query=query,
            top_k=memories_for(body.token_budget),
            as_of=body.as_of,
            session_id=session_id,
            rewrite=body.rewrite,
            # The user's turns stored under their name ("Ana: …") are found by it, and the
            # named speaker's memories come first (`speaker_first`): the name stays.
            first_person=all(
                message_speaker(m).casefold() != body.user_id.casefold() for m in recent
            ),
            # The turns before the message the query is (or, for a caller's query, all of
            # them): what a follow-up's pronouns point at.
            turns=tuple(
                Turn(m.role, m.content)
                for m in (
                    recent[:last_user] if not body.query and last_user is not None else recent
                )
            ),
        )
        # The second search starts beside the first when the conversation already shows
        # whom the question names (a speaker of its turns): it waits for the first only when
        # the first finds other names, or rewrites the question.
        ahead = _Ahead.start(self.recall, spec, query, {message_speaker(m) for m in recent})
        try:
            search = await self.recall.search(spec)
            memories = relevant(search.results)
            asked = search.rewritten_query or query
            theirs = await self._theirs(spec, asked, memories[CONTEXT_SPEAKER_HEAD:], ahead)
        finally:
            if ahead is not None:
                ahead.drop()
        memories = speaker_first(memories, asked, theirs=theirs.results)
        return _Recalled(
            memories, search.rewritten_query, search.llm_usage, search.used | theirs.used
        )

    async def _theirs(
        self,
        spec: SearchSpec,
        query: str,
        deep: Sequence[RecallResult],
        ahead: _Ahead | None = None,
    ) -> _Theirs:
        """What the speakers the query names said (among `deep`, recall's list past its
        head), as the query without their names finds it (`CONTEXT_SPEAKER_HEAD`); `ahead`,
        that search started early, is used when it asked the same."""
        named = named_speakers(deep, query)
        unnamed = without_names(query, sorted(named))
        if not named or not re.search(r"\w", unnamed):
            return _Theirs()
        if ahead is not None and ahead.query == unnamed:
            found = await ahead.task
        else:
            found = await self.recall.search(_unnamed_spec(spec, unnamed))
        results = [r for r in relevant(found.results) if memory_speaker(r) in named]
        return _Theirs(results, found.used & {r.id for r in results})

    async def _profile(self, tx: AsyncSession, tenant_id: str, body: ContextRequest) -> Profile:
        """The attributes and the facts true at `as_of` (or now)."""
        if self.profile is None:
            return Profile(user_id=body.user_id, attributes={}, facts=[])
        return await self.profile.read(tx, tenant_id, body.user_id, as_of=body.as_of)

    async def _summaries(
        self, tx: AsyncSession, tenant_id: str, body: ContextRequest, before: datetime
    ) -> list[SummaryOut]:
        """Older periods where the verbatim turns stop (`_summaries_before`)."""
        if self.summaries is None:
            return []
        return await self.summaries.for_context(tx, tenant_id, body.user_id, before)


def stored_size(value: tuple[Profile, list[SummaryOut]]) -> int:
    """Roughly what a cached profile and summaries hold, in bytes: their text, and a few
    hundred bytes of objects per item (`ContextCache`'s bound)."""
    profile, summaries = value
    texts = [f.content for f in profile.facts] + [s.content for s in summaries]
    items = len(texts) + len(profile.attributes)
    return len(orjson.dumps(profile.attributes)) + sum(map(len, texts)) + 400 * (items + 1)


def _twins(
    memories: Sequence[RecallResult], recent: Sequence[MessageOut], session_id: str
) -> dict[int, int]:
    """Memory index -> the index of the recent turn that shows all it says: every source is
    one of the recent turns, and the oldest of them stands for all (the turns kept are an
    unbroken run up to the newest, so with it the others are shown too)."""
    at = {m.seq: n for n, m in enumerate(recent)}
    twins: dict[int, int] = {}
    for n, r in enumerate(memories):
        turns = [at.get(s.seq) if s.session_id == session_id else None for s in r.sources]
        if turns and all(t is not None for t in turns):
            twins[n] = min(t for t in turns if t is not None)
    return twins


def _summaries_before(body: ContextRequest, recent: list[MessageOut]) -> datetime:
    """Summaries are of what ended before the oldest turn read (and, in a replay, before
    `as_of`)."""
    now = body.as_of or datetime.now(UTC)
    return min(recent[0].created_at, now) if recent else now


def _keys(packed: packing.Packed, section: str) -> list[int]:
    """The items of `section` the packing kept."""
    return [item.key for item in packed.kept.get(section, [])]


def relevant(results: Sequence[RecallResult]) -> list[RecallResult]:
    """The best `CONTEXT_ANY_RELEVANCE` whatever their relevance; past them, those that
    reach recall's default floor, as recall's floor (`MinRelevance`) keeps summaries."""
    return [
        r
        for rank, r in enumerate(results)
        if (
            rank < CONTEXT_ANY_RELEVANCE
            or r.scores.semantic >= DEFAULT_MIN_RELEVANCE
            or r.kind == "summary"
        )
    ]


def _unnamed_spec(spec: SearchSpec, unnamed: str) -> SearchSpec:
    return replace(spec, query=unnamed, rewrite="off")


@dataclass(slots=True)
class _Ahead:
    """The named speakers' search, started before the first search ends (`_theirs`)."""

    query: str
    task: asyncio.Task[Found]

    @classmethod
    def start(
        cls, recall: RecallService, spec: SearchSpec, query: str, speakers: set[str]
    ) -> _Ahead | None:
        """Started when the query names some of `speakers` (the conversation's)."""
        named = sorted(s for s in speakers if ranking.names_speaker(query, s))
        unnamed = without_names(query, named)
        if not named or not re.search(r"\w", unnamed):
            return None
        task = asyncio.ensure_future(recall.search(_unnamed_spec(spec, unnamed)))
        return cls(unnamed, task)

    def drop(self) -> None:
        """Cancelled if unused; an error of a search nobody awaited is not logged as lost."""
        self.task.cancel()
        self.task.add_done_callback(lambda t: t.cancelled() or t.exception())


@dataclass(frozen=True, slots=True)
class _Theirs:
    results: list[RecallResult] = field(default_factory=list)
    used: frozenset[uuid.UUID] = frozenset()


@dataclass(frozen=True, slots=True)
class _Recalled:
    memories: list[RecallResult]
    rewritten_query: str | None
    llm_usage: dict[str, int] | None
    used: frozenset[uuid.UUID] = frozenset()  # those a use reinforces (`Found.used`)


def _kept_profile(
    attributes: list[tuple[str, Any]], facts: list[ProfileFact], kept: Sequence[int]
) -> dict[str, Any]:
    """The profile section as answered: the attributes and facts that fit the budget."""
    n = len(attributes)
    out: dict[str, Any] = {}
    kept_attributes = {attributes[i][0]: attributes[i][1] for i in kept if i < n}
    kept_facts = [facts[i - n].model_dump(mode="json") for i in kept if i >= n]
    if kept_attributes:
        out["attributes"] = kept_attributes
    if kept_facts:
        out["facts"] = kept_facts
    return out


def _kept_entries(entries: dict[str, Any], kept: Sequence[int]) -> dict[str, Any]:
    keys = list(entries)
    return {keys[i]: entries[keys[i]] for i in kept}
