"""Chunking: one memory per turn, earlier turns as index context, deterministic ids."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from app.core.chunking import LogMessage, chunk_turns, heuristic_importance, memory_id

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def msg(seq: int, content: str, role: str = "user", name: str | None = None) -> LogMessage:
    meta = {"name": name} if name else {}
    return LogMessage("s1", seq, f"c{seq}", role, content, T0, meta)


def test_a_turn_is_indexed_with_the_turns_before_it() -> None:
    history = [msg(1, "Did you go to the concert?", "assistant", "Mel"), msg(2, "Yes, loved it!")]
    [first, second] = chunk_turns("t", "i0", [], history, dense_context=1, sparse_context=2)
    assert second.content == "user: Yes, loved it!"
    assert second.dense_context == ["Mel: Did you go to the concert?"]
    assert second.sparse_context == ["Mel: Did you go to the concert?"]
    assert second.sources == [{"session_id": "s1", "message_id": "c2", "seq": 2}]
    assert first.sparse_context == []


def test_system_messages_are_not_memories_nor_context() -> None:
    chunks = chunk_turns(
        "t",
        "i0",
        [],
        [msg(1, "hi"), msg(2, "You are terse.", "system"), msg(3, "bye")],
        dense_context=1,
        sparse_context=1,
    )
    assert [c.content for c in chunks] == ["user: hi", "user: bye"]
    assert chunks[1].sparse_context == ["user: hi"]


def test_messages_without_client_id_get_a_seq_source() -> None:
    m = LogMessage("s1", 7, None, "user", "x", T0, {})
    [chunk] = chunk_turns("t", "i0", [], [m], dense_context=0, sparse_context=0)
    assert chunk.sources == [{"session_id": "s1", "message_id": "seq:7", "seq": 7}]


@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=30), st.data())
def test_chunks_do_not_depend_on_batch_boundaries(texts: list[str], data: st.DataObject) -> None:
    messages = [msg(i + 1, t, "user" if i % 2 else "assistant") for i, t in enumerate(texts)]
    whole = chunk_turns("t", "i0", [], messages, dense_context=1, sparse_context=2)
    cut = data.draw(st.integers(0, len(messages)))
    later = chunk_turns(
        "t", "i0", messages[:cut], messages[cut:], dense_context=1, sparse_context=2
    )
    first = chunk_turns("t", "i0", [], messages[:cut], dense_context=1, sparse_context=2)
    # Promoted before the rest arrived, the last turn of the first batch lacks its next
    # turn; rebuilt with the log after it (as promotion rebuilds it), it is the same.
    rebuilt = chunk_turns(
        "t", "i0", [], messages[:cut], dense_context=1, sparse_context=2, following=messages[cut:]
    )
    assert rebuilt + later == whole
    assert first[:-1] == rebuilt[:-1]
    if first and later:
        assert first[-1].after is None
        assert rebuilt[-1].after == later[0].content


def test_a_turn_is_indexed_with_the_next_turn_once_it_is_in_the_log() -> None:
    history = [
        msg(1, "I opened my own car shop!"),
        msg(2, "Be terse.", "system"),
        msg(3, "Wow, a car shop, congrats!", "assistant"),
    ]
    [first, second] = chunk_turns("t", "i0", [], history, dense_context=1, sparse_context=2)
    assert first.after == "assistant: Wow, a car shop, congrats!"  # the system message skipped
    assert second.after is None
    [alone] = chunk_turns(
        "t", "i0", [], history[:1], dense_context=1, sparse_context=2, following=history[1:]
    )
    assert alone == first


def test_ids_are_deterministic_and_scoped() -> None:
    assert memory_id("t", "s", "i0", 1) == memory_id("t", "s", "i0", 1)
    assert memory_id("t", "s", "i0", 1) != memory_id("t", "s", "i0", 2)
    assert memory_id("t", "s", "i0", 1) != memory_id("u", "s", "i0", 1)
    # A re-created session (another incarnation) never reuses its predecessor's ids.
    assert memory_id("t", "s", "i0", 1) != memory_id("t", "s", "i1", 1)


def test_heuristic_importance_ranks_durable_facts_above_chatter() -> None:
    fact = heuristic_importance("I am allergic to penicillin, remember that for 2025.")
    chatter = heuristic_importance("ok thanks")
    chinese = heuristic_importance("我对花生过敏，请记住。")
    assert 0 <= chatter < fact <= 1
    assert chinese > chatter


def test_a_long_text_is_embedded_as_windows_spread_over_it() -> None:
    from app.core.chunking import embedding_windows

    assert embedding_windows("short text") == ["short text"]
    exact = "x" * 2_000
    assert embedding_windows(exact) == [exact]
    text = "".join(f"{i:05d}" for i in range(6_400))  # 32,000 characters
    windows = embedding_windows(text)
    assert len(windows) == 4
    assert all(len(w) == 2_000 for w in windows)
    assert windows[0] == text[:2_000]
    assert windows[-1] == text[-2_000:]  # the end is read too, not only the start
    assert embedding_windows("y" * 2_500) == ["y" * 2_000, "y" * 2_000]
