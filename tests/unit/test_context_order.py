"""The order the context offers recalled memories in: recall's best first, then, past them,
what someone the question names said (issue 40)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from app.core.ranking import names_speaker
from app.schemas.common import Source
from app.schemas.recall import RecallResult, Scores
from app.services.context import (
    ContextService,
    _Ahead,
    memory_speaker,
    speaker_first,
    without_names,
)
from app.services.search import Found, SearchSpec


def memory(content: str, *, turn: bool = True) -> RecallResult:
    return RecallResult(
        id=uuid.uuid4(),
        kind="memory",
        memory_type="episodic",
        content=content,
        score=0.5,
        scores=Scores(semantic=0.5, recency=0.5, importance=0.5),
        created_at=datetime(2024, 6, 5, tzinfo=UTC),
        last_accessed_at=None,
        access_count=0,
        sources=[Source(session_id="s", message_id="m", seq=1)] if turn else [],
        metadata={},
    )


def test_past_the_head_the_named_speakers_memories_come_first_in_recalls_order() -> None:
    ben = [memory(f"Ben: Joanna baked cake number {i} for me.") for i in range(4)]
    joanna = [memory(f"Joanna: I made a tart, try {i}.") for i in range(3)]
    ranked = [ben[0], joanna[0], ben[1], ben[2], joanna[1], ben[3], joanna[2]]
    out = speaker_first(ranked, "What recipes has Joanna made?", head=2)
    assert out == [ben[0], joanna[0], joanna[1], joanna[2], ben[1], ben[2], ben[3]]
    # The head is recall's order, whoever said what.
    assert speaker_first(ranked, "What recipes has Joanna made?", head=7) == ranked


def test_a_query_that_names_no_speaker_leaves_the_order() -> None:
    ranked = [memory(f"Ben: cake {i}") for i in range(3)] + [memory("Joanna: tart")]
    assert speaker_first(ranked, "Which cakes were baked?", head=1) == ranked
    # A name inside another word is not the name ("Benjamin" is not "Ben").
    assert speaker_first(ranked, "What did Benjamin bake?", head=1) == ranked


def test_a_memory_written_as_such_has_no_speaker() -> None:
    assert memory_speaker(memory("Joanna: likes tarts", turn=False)) is None
    assert memory_speaker(memory("no speaker here")) is None
    assert memory_speaker(memory("Joanna: likes tarts")) == "Joanna"
    note = memory("Note: Joanna likes tarts", turn=False)
    ranked = [memory("Ben: hi"), memory("Ben: cake"), note]
    assert speaker_first(ranked, "What does Joanna like?", head=1) == ranked


def test_names_are_matched_as_words_and_chinese_names_anywhere() -> None:
    assert names_speaker("what did joanna make?", "Joanna")
    assert not names_speaker("what did Joannas make?", "Joanna")
    assert names_speaker("小王上周去了哪里？", "小王")
    assert not names_speaker("Where did I go?", "user")


def test_another_ranking_of_the_named_speakers_memories_goes_first_each_once() -> None:
    ben = [memory(f"Ben: Joanna baked cake number {i} for me.") for i in range(3)]
    joanna = [memory(f"Joanna: I made a tart, try {i}.") for i in range(3)]
    ranked = [ben[0], joanna[0], ben[1], joanna[1], ben[2], joanna[2]]
    # The second search found Joanna's third first, her first (in the head) again, and
    # one of Ben's, which is not hers.
    theirs = [joanna[2], joanna[0], ben[1]]
    out = speaker_first(ranked, "What recipes has Joanna made?", head=2, theirs=theirs)
    assert out == [ben[0], joanna[0], joanna[2], joanna[1], ben[1], ben[2]]
    # A query that names nobody keeps recall's order, whatever the other ranking.
    assert speaker_first(ranked, "What recipes?", head=2, theirs=theirs) == ranked


def test_without_names_takes_the_name_and_its_possessive_out() -> None:
    assert without_names("What is Joanna's favourite tart, joanna?", ["Joanna"]) == (
        "What is favourite tart, ?"
    )
    assert without_names("Did Ben meet Joanna’s sister?", ["Joanna", "Ben"]) == "Did meet sister?"
    assert without_names("What did Benjamin bake?", ["Ben"]) == "What did Benjamin bake?"
    assert without_names("小王上周去了哪里？", ["小王"]) == "上周去了哪里？"


class _Searches:
    """A recall that answers each query from `answers` once its gate opens, and keeps the
    order the searches began and ended in."""

    def __init__(self, answers: dict[str, list[RecallResult]]) -> None:
        self.answers = answers
        self.began: list[str] = []
        self.ended: list[str] = []
        self.gate = asyncio.Event()

    async def search(self, spec: SearchSpec) -> Found:
        self.began.append(spec.query)
        await self.gate.wait()
        self.ended.append(spec.query)
        return Found(self.answers[spec.query], None)


def _service(recall: _Searches) -> ContextService:
    service = ContextService.__new__(ContextService)  # only `recall` is used below
    service.recall = recall  # type: ignore[assignment]
    return service


def _spec(query: str) -> SearchSpec:
    return SearchSpec(tenant_id="t", user_id="u", query=query, top_k=30)


async def test_the_named_speakers_search_starts_beside_the_first_when_the_talk_shows_them() -> None:
    """The conversation shows Joanna, whom the question names: the search without her name
    begins before the first search ends, and its answer is the one used (issue 40: the
    second search no longer waits for the first)."""
    query = "Which desserts does Joanna make?"
    tart, other = memory("Joanna: I baked a raspberry tart."), memory("Ben: Joanna bakes!")
    searches = _Searches({query: [other, tart], "Which desserts does make?": [tart]})
    ahead = _Ahead.start(searches, _spec(query), query, {"Joanna", "Ben"})  # type: ignore[arg-type]
    assert ahead is not None
    assert ahead.query == "Which desserts does make?"
    first = asyncio.ensure_future(searches.search(_spec(query)))
    await asyncio.sleep(0)
    assert sorted(searches.began) == sorted([query, "Which desserts does make?"])
    assert searches.ended == []  # side by side
    searches.gate.set()
    deep = (await first).results
    theirs = await _service(searches)._theirs(_spec(query), query, deep, ahead)
    assert [r.content for r in theirs.results] == [tart.content]
    assert len(searches.began) == 2  # no third search: the early one answered


async def test_an_early_search_that_asked_otherwise_is_not_used() -> None:
    """Recall found a named speaker the conversation did not show (or rewrote the
    question): the second search is made for what it found, the early one dropped."""
    query = "Did Joanna and Nate bake?"
    tart, nate = memory("Joanna: I baked a tart."), memory("Nate: I baked bread.")
    searches = _Searches({"Did and bake?": [tart, nate], "Did Joanna and bake?": [tart]})
    searches.gate.set()
    ahead = _Ahead.start(searches, _spec(query), query, {"Nate", "Ben"})  # type: ignore[arg-type]
    assert ahead is not None
    assert ahead.query == "Did Joanna and bake?"
    await asyncio.sleep(0)  # it began
    theirs = await _service(searches)._theirs(_spec(query), query, [tart, nate], ahead)
    ahead.drop()
    assert searches.began == ["Did Joanna and bake?", "Did and bake?"]
    assert {r.content for r in theirs.results} == {tart.content, nate.content}


def test_no_early_search_when_the_question_names_none_of_the_talk() -> None:
    searches = _Searches({})
    spec = _spec("What did I bake?")
    assert _Ahead.start(searches, spec, "What did I bake?", {"user", "Joanna"}) is None  # type: ignore[arg-type]
    assert _Ahead.start(searches, spec, "Joanna?", {"Joanna"}) is None  # type: ignore[arg-type]
    assert searches.began == []
