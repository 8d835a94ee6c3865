"""Near-duplicate detection (`app.core.dedupe`): the plan of a promotion batch, pure."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from app.core.chunking import Chunk
from app.core.dedupe import (
    ExistingMemory,
    Gain,
    apply_gain,
    content_hash,
    plan_batch,
)

T0 = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)
EAST, NORTH = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]


def source(session: str, seq: int) -> dict[str, Any]:
    return {"session_id": session, "message_id": f"seq:{seq}", "seq": seq}


def chunk(text: str, seq: int, session: str = "s1", minutes: int = 0) -> Chunk:
    return Chunk(
        id=uuid.uuid5(uuid.NAMESPACE_URL, f"{session}/{seq}"),
        content=text,
        dense_context=[],
        sparse_context=[],
        sources=[source(session, seq)],
        created_at=T0 + timedelta(minutes=minutes),
        importance=0.5,
    )


def existing(text: str, vector: list[float] | None) -> dict[str, ExistingMemory]:
    return {content_hash(text): ExistingMemory(uuid.uuid4(), vector)}


def test_the_content_hash_ignores_case_punctuation_and_spacing() -> None:
    assert content_hash("user: I like  tea!") == content_hash("USER I like tea")
    assert content_hash("user: I like tea") != content_hash("user: I like coffee")


def test_distinct_chunks_are_all_new() -> None:
    a, b = chunk("user: tea", 1), chunk("user: coffee", 2)
    plan = plan_batch([a, b], [EAST, EAST], set(), {}, 0.9)
    assert [m.chunk for m in plan.fresh] == [a, b]
    assert [m.vector for m in plan.fresh] == [EAST, EAST]
    assert plan.merges == {}


def test_an_exact_duplicate_within_a_batch_merges_into_the_first() -> None:
    first = chunk("user: I run marathons", 1, minutes=0)
    again = chunk("User: I run marathons!", 5, minutes=30)
    plan = plan_batch([first, again], [EAST, EAST], set(), {}, 0.9)
    [memory] = plan.fresh
    assert memory.chunk is first
    assert memory.sources == [source("s1", 1), source("s1", 5)]
    assert memory.created_at == again.created_at  # the newest
    assert plan.merges == {}


def test_the_same_text_in_a_different_context_stays_separate() -> None:
    yes_to_tea, yes_to_rain = chunk("user: yes", 1), chunk("user: yes", 2)
    plan = plan_batch([yes_to_tea, yes_to_rain], [EAST, NORTH], set(), {}, 0.9)
    assert [m.chunk for m in plan.fresh] == [yes_to_tea, yes_to_rain]


def test_a_duplicate_of_an_existing_memory_becomes_its_gain() -> None:
    text = "user: I live in Lisbon"
    known = existing(text, EAST)
    [prior] = known.values()
    dup = chunk(text, 3, session="s2", minutes=10)
    plan = plan_batch([dup], [EAST], set(), known, 0.9)
    assert plan.fresh == []
    assert plan.merges == {prior.id: Gain([source("s2", 3)], dup.created_at, text)}


def test_an_existing_memory_in_another_context_is_not_a_merge_target() -> None:
    text = "user: yes"
    plan = plan_batch([chunk(text, 1)], [NORTH], set(), existing(text, EAST), 0.9)
    assert len(plan.fresh) == 1
    assert plan.merges == {}


def test_an_existing_memory_missing_from_the_index_is_not_a_merge_target() -> None:
    text = "user: I live in Lisbon"
    plan = plan_batch([chunk(text, 1)], [EAST], set(), existing(text, None), 0.9)
    assert len(plan.fresh) == 1
    assert plan.merges == {}


def test_several_duplicates_of_one_existing_memory_accumulate() -> None:
    text = "user: I live in Lisbon"
    known = existing(text, EAST)
    [prior] = known.values()
    dups = [chunk(text, 7, minutes=5), chunk(text, 9, minutes=50), chunk(text, 8, minutes=20)]
    plan = plan_batch(dups, [EAST, EAST, EAST], set(), known, 0.9)
    assert plan.fresh == []
    gain = plan.merges[prior.id]
    assert gain.sources == [source("s1", 7), source("s1", 9), source("s1", 8)]
    assert gain.newest_at == T0 + timedelta(minutes=50)
    assert gain.reason == text  # the first duplicate's text


def test_every_copy_in_a_batch_of_an_existing_memory_joins_it() -> None:
    """No copy stays fresh for the later ones to join: all of them are the memory's gain."""
    text = "user: I live in Lisbon"
    known = existing(text, EAST)
    [prior] = known.values()
    plan = plan_batch([chunk(text, 1), chunk(text, 2)], [EAST, EAST], set(), known, 0.9)
    assert plan.fresh == []
    assert plan.merges[prior.id].sources == [source("s1", 1), source("s1", 2)]


def test_a_replayed_chunk_is_neither_rewritten_nor_merged_again() -> None:
    text = "user: I live in Lisbon"
    stored, dup = chunk(text, 1), chunk(text, 2)
    known = existing(text, EAST)
    plan = plan_batch([stored, dup], [EAST, EAST], {stored.id}, known, 0.9)
    assert plan.fresh == []
    [gain] = plan.merges.values()
    assert gain.sources == [source("s1", 2)]  # only the chunk not stored yet
    assert plan_batch([stored], [EAST], {stored.id}, {}, 0.9).fresh == []


def test_the_threshold_is_inclusive() -> None:
    """cos([1,0,0], [3,4,0]) is exactly 0.6."""
    a, b = chunk("user: ok", 1), chunk("user: ok", 2)
    vectors = [EAST, [3.0, 4.0, 0.0]]
    assert len(plan_batch([a, b], vectors, set(), {}, 0.6).fresh) == 1
    assert len(plan_batch([a, b], vectors, set(), {}, 0.6000001).fresh) == 2
    known = existing("user: ok", EAST)
    assert plan_batch([b], [[3.0, 4.0, 0.0]], set(), known, 0.6).merges
    assert not plan_batch([b], [[3.0, 4.0, 0.0]], set(), known, 0.6000001).merges


def test_a_zero_vector_is_like_nothing() -> None:
    a, b = chunk("user: ok", 1), chunk("user: ok", 2)
    assert len(plan_batch([a, b], [[0.0] * 3, [0.0] * 3], set(), {}, 0.0).fresh) == 1
    assert len(plan_batch([a, b], [[0.0] * 3, [0.0] * 3], set(), {}, 0.1).fresh) == 2


def test_planning_leaves_its_inputs_alone() -> None:
    text = "user: I live in Lisbon"
    first, dup = chunk(text, 1), chunk(text, 2)
    plan_batch([first, dup], [EAST, EAST], set(), {}, 0.9)
    assert first.sources == [source("s1", 1)]
    assert dup.sources == [source("s1", 2)]


def test_a_gain_adds_only_sources_the_memory_does_not_name() -> None:
    gain = Gain([source("s1", 1), source("s2", 4)], T0 + timedelta(days=1), "why")
    merged = apply_gain([source("s1", 1)], T0, gain)
    assert merged is not None
    assert merged.sources == [source("s1", 1), source("s2", 4)]
    assert merged.created_at == T0 + timedelta(days=1)


def test_a_gain_keeps_the_newer_time_of_the_memory() -> None:
    gain = Gain([source("s2", 4)], T0, "why")
    merged = apply_gain([source("s1", 1)], T0 + timedelta(days=1), gain)
    assert merged is not None
    assert merged.created_at == T0 + timedelta(days=1)


def test_a_gain_already_applied_changes_nothing() -> None:
    """Sources match by (session, seq): a message id may be `seq:N` or the client's."""
    named = {"session_id": "s1", "message_id": "m-client", "seq": 1}
    assert apply_gain([named], T0, Gain([source("s1", 1)], T0, "why")) is None
