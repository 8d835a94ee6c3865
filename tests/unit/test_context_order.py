"""The order the context offers recalled memories in: recall's best first, then, past them,
what someone the question names said (issue 40)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from app.schemas.common import Source
from app.schemas.recall import RecallResult, Scores
from app.services.context import memory_speaker, names_speaker, speaker_first, without_names


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
