"""Query rewriting (`POST /v1/rewrite`, and the rewrite stage of recall and context): a
follow-up that leans on the conversation becomes a standalone question from the session's
last turns.

With an LLM configured, the model writes the standalone question; its answer is validated
(not empty, no name the conversation never mentioned) and any failure falls back to the
heuristic of `app/core/rewrite.py`, which is also what runs without an LLM. Only a query
that needs its context is rewritten (pronouns, demonstratives, ellipsis): a self-contained
one is returned as asked, and costs no LLM call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

from pydantic import BaseModel, Field

from app import malloc
from app.core.rewrite import (
    Rewrite,
    Turn,
    heuristic_rewrite,
    load_tagger,
    needs_context,
    tagger_missing_for,
    unknown_entities,
)
from app.providers.llm import LLM, LLMError
from app.schemas.ingest import MessageOut
from app.schemas.rewrite import RewriteRequest, RewriteResponse
from app.services.ingest import IngestService
from app.services.search import SearchSpec

log = logging.getLogger("strata.rewrite")

# The turns a rewrite reads: a follow-up points at the last few, rarely further.
REWRITE_TURNS = 8

SYSTEM_PROMPT = """You rewrite a user's follow-up question into a standalone question.
Use the conversation to resolve pronouns, demonstratives and omitted subjects. Keep the
question's language (Chinese stays Chinese, English stays English) and its meaning; add
nothing the conversation does not say. If the question is already standalone, return it
unchanged. Answer with JSON only: {"rewritten": "<the standalone question>"}"""


class _Answer(BaseModel):
    rewritten: str = Field(min_length=1, max_length=2000)


def _transcript(turns: Sequence[Turn]) -> str:
    return "\n".join(f"{t.role}: {t.content}" for t in turns)


class RewriteService:
    def __init__(
        self, ingest: IngestService, llm: LLM | None, *, freeze_after_load: bool = False
    ) -> None:
        self.ingest = ingest
        self.llm = llm
        # The tagger's tables out of the collector's reach once loaded, as start-up's are
        # (`STRATA_GC_FREEZE`, app/malloc.py).
        self.freeze_after_load = freeze_after_load
        self._tagger_settled = False

    async def rewrite(self, tenant_id: str, body: RewriteRequest) -> RewriteResponse:
        # Reading the turns checks the session belongs to the user (404 otherwise).
        turns = await self._turns(tenant_id, body.session_id, body.user_id, body.query)
        result = await self.standalone(body.query, turns)
        return RewriteResponse(
            query=result.query,
            rewritten=result.rewritten,
            changed=result.changed,
            method=result.method,
            usage=result.usage,
        )

    async def for_search(self, spec: SearchSpec, /) -> Rewrite | None:
        """The recall pipeline's rewriter: the turns are the spec's (context read them
        already) or the session's newest; without a session there is nothing to resolve."""
        if not needs_context(spec.query):
            return None
        seqs: frozenset[int] = frozenset()
        if spec.turns is not None:
            turns = list(spec.turns)
        elif spec.session_id is not None:
            read, asked = await self._read(
                spec.tenant_id, spec.session_id, spec.user_id, spec.query
            )
            turns = [Turn(m.role, m.content) for m in read]
            # The question's own turn, when it was stored first, is held too.
            seqs = frozenset(m.seq for m in [*read, *asked])
        else:
            return None
        result = await self.standalone(spec.query, turns)
        return dataclasses.replace(result, read=seqs) if result.changed else None

    async def standalone(self, query: str, turns: Sequence[Turn]) -> Rewrite:
        """The LLM's rewrite when one is configured and its answer holds up, else the
        heuristic's."""
        if not turns or not needs_context(query):
            return Rewrite(query, query, False, "none")
        if tagger_missing_for(query, turns):
            await asyncio.to_thread(load_tagger)  # its first import, off the event loop
            if not self._tagger_settled:
                self._tagger_settled = True  # once: concurrent first requests all load it
                if self.freeze_after_load:
                    malloc.freeze_long_lived(collect=False)
                # The import's own tag table (~40 MiB, replaced by the segmenter's) is free
                # heap now: given back (the call releases the GIL).
                await asyncio.to_thread(malloc.trim)
        if self.llm is not None:
            try:
                result = await self.llm.complete_json(
                    [
                        {"role": "system", "content": SYSTEM_PROMPT},
                        {
                            "role": "user",
                            "content": f"Conversation:\n{_transcript(turns)}\n\n"
                            f"Follow-up question: {query}",
                        },
                    ],
                    _Answer,
                    purpose="rewrite",
                )
            except LLMError as exc:
                log.warning("LLM rewrite failed (%s); using the heuristic", exc)
            else:
                rewritten = result.value.rewritten.strip()
                invented = unknown_entities(rewritten, query + "\n" + _transcript(turns))
                usage = result.usage.as_dict()
                if rewritten and not invented:
                    return Rewrite(query, rewritten, rewritten != query, "llm", usage=usage)
                log.warning("LLM rewrite named %s, absent from the conversation", invented[:3])
                fallback = heuristic_rewrite(query, turns)
                return Rewrite(
                    fallback.query,
                    fallback.rewritten,
                    fallback.changed,
                    fallback.method,
                    fallback.terms,
                    usage,
                )
        return heuristic_rewrite(query, turns)

    async def _turns(self, tenant_id: str, session_id: str, user_id: str, query: str) -> list[Turn]:
        read, _ = await self._read(tenant_id, session_id, user_id, query)
        return [Turn(m.role, m.content) for m in read]

    async def _read(
        self, tenant_id: str, session_id: str, user_id: str, query: str
    ) -> tuple[list[MessageOut], list[MessageOut]]:
        """The session's newest turns, without the query itself when it is the last one
        (context asks about the message the user just sent), and that turn when it was."""
        session = await self.ingest.get_session(tenant_id, session_id, user_id)
        recent = await self.ingest.recent(tenant_id, session, REWRITE_TURNS + 1)
        asked: list[MessageOut] = []
        if recent and recent[-1].role == "user" and recent[-1].content.strip() == query.strip():
            recent, asked = recent[:-1], recent[-1:]
        return recent[-REWRITE_TURNS:], asked
