"""Context assembly: the session's instructions, newest turns and recalled memories,
packed into the caller's token budget (DESIGN §2, context)."""

from __future__ import annotations

from app.core import packing
from app.core.tokens import TokenCounter
from app.errors import InvalidInput
from app.schemas.context import ContextRequest, ContextResponse, ContextSections
from app.schemas.ingest import MessageOut
from app.schemas.recall import RecallResult
from app.services.ingest import IngestService
from app.services.recall import RecallService
from app.services.search import SearchSpec

# Memories fetched for packing; the budget decides how many stay.
CONTEXT_TOP_K = 30


def _line(m: MessageOut) -> str:
    name = m.metadata.get("name") if m.metadata else None
    speaker = name if isinstance(name, str) and name.strip() else m.role
    return f"{speaker}: {m.content}"


def _memory_line(r: RecallResult) -> str:
    return f"[{r.created_at.date().isoformat()}] {r.content}"


class ContextService:
    def __init__(
        self,
        ingest: IngestService,
        recall: RecallService,
        tokens: TokenCounter,
        *,
        window: int,
    ) -> None:
        self.ingest = ingest
        self.recall = recall
        self.tokens = tokens
        self.window = window  # newest turns read for packing (the buffer's window)

    async def build(self, tenant_id: str, session_id: str, body: ContextRequest) -> ContextResponse:
        session = await self.ingest.get_session(tenant_id, session_id, body.user_id)
        window = self.window
        if body.as_of is None:
            recent = await self.ingest.recent(tenant_id, session, window)
        else:  # a replay: the session as it stood then, from the log
            recent = await self.ingest.recent_until(tenant_id, session_id, body.as_of, window)

        last_user = next(
            (i for i in range(len(recent) - 1, -1, -1) if recent[i].role == "user"), None
        )
        if last_user is None and recent and recent[0].seq > 1:
            # The user spoke before the window (a long run of tool and assistant turns):
            # the last user message is still owed verbatim, ahead of the window.
            earlier = await self.ingest.last_user_message(tenant_id, session_id, body.as_of)
            if earlier is not None:
                recent = [earlier, *recent]
                last_user = 0
        query = body.query or (recent[last_user].content if last_user is not None else None)

        memories: list[RecallResult] = []
        if query:
            spec = SearchSpec(
                tenant_id=tenant_id,
                user_id=body.user_id,
                query=query,
                top_k=CONTEXT_TOP_K,
                as_of=body.as_of,
                session_id=session_id,
                # A caller's own query is searched as given; the last user message is a
                # turn of a conversation and may need its referents (DESIGN §2, context).
                rewrite="off" if body.query else "auto",
            )
            found = (await self.recall.search(spec)).results
            # What the recent turns already say verbatim is not worth its tokens twice.
            shown = {m.seq for m in recent}
            memories = [
                r
                for r in found
                if not r.sources
                or not all(s.session_id == session_id and s.seq in shown for s in r.sources)
            ]

        try:
            packed = packing.pack(
                system_prompt=session.system_prompt or "",
                memories=[packing.Item(i, _memory_line(r)) for i, r in enumerate(memories)],
                recent=[packing.Item(i, _line(m)) for i, m in enumerate(recent)],
                required_recent=last_user,
                budget=body.token_budget,
                count=self.tokens,
            )
        except packing.BudgetTooSmall as exc:
            raise InvalidInput(
                "token_budget",
                f"{body.token_budget} is too small: the system prompt and the last user "
                f"message alone need {exc.needed} tokens",
                code="token_budget_too_small",
            ) from exc

        kept_memories = [memories[item.key] for item in packed.memories]
        if kept_memories and body.as_of is None:  # a replay of the past changes nothing
            self.recall.reinforce_later(tenant_id, body.user_id, [m.id for m in kept_memories])
        return ContextResponse(
            sections=ContextSections(
                system_prompt=packed.system_prompt,
                working_memory={},
                profile={},
                summaries=[],
                memories=kept_memories,
                recent_messages=[recent[item.key] for item in packed.recent],
            ),
            text=packed.text,
            tokens=packed.tokens,
            token_budget=body.token_budget,
            tokenizer=self.tokens.encoding,
            dropped=packed.dropped,
        )
