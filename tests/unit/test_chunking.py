"""Chunking: one memory per turn, earlier turns as index context, deterministic ids."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from app.core.chunking import Chunk, LogMessage, chunk_turns, heuristic_importance, memory_id

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


def cut(
    context: list[LogMessage], new: list[LogMessage], following: list[LogMessage] | None = None
) -> list[Chunk]:
    """As promotion and reindex chunk: the next turn within 5 seqs, context within 8."""
    return chunk_turns(
        "t",
        "i0",
        context,
        new,
        dense_context=1,
        sparse_context=2,
        following=following or [],
        next_within=5,
        back_within=8,
    )


ROLES = st.sampled_from(["user", "assistant", "system"])


@given(st.lists(st.tuples(st.text(min_size=1, max_size=30), ROLES), max_size=40), st.data())
def test_chunks_do_not_depend_on_batch_boundaries(
    texts: list[tuple[str, str]], data: st.DataObject
) -> None:
    messages = [msg(i + 1, t, role) for i, (t, role) in enumerate(texts)]
    whole = cut([], messages)
    at = data.draw(st.integers(0, len(messages)))
    later = cut(messages[:at], messages[at:])
    first = cut([], messages[:at])
    # Promoted before the rest arrived, the last turn of the first batch lacks its next
    # turn; rebuilt with the log after it (as promotion rebuilds it), it is the same.
    rebuilt = cut([], messages[:at], messages[at:])
    assert rebuilt + later == whole
    assert first[:-1] == rebuilt[:-1]
    if first:
        assert first[-1].after is None


def test_a_turn_is_indexed_with_the_next_turn_once_it_is_in_the_log() -> None:
    history = [
        msg(1, "I opened my own car shop!"),
        msg(2, "Be terse.", "system"),
        msg(3, "Wow, a car shop, congrats!", "assistant"),
    ]
    [first, second] = cut([], history)
    assert first.after == "assistant: Wow, a car shop, congrats!"  # the system message skipped
    assert second.after is None
    [alone] = cut([], history[:1], history[1:])
    assert alone == first
    # Off unless asked for.
    [plain, _] = chunk_turns("t", "i0", [], history, dense_context=1, sparse_context=2)
    assert plain.after is None


def test_a_question_about_the_user_is_no_next_turn() -> None:
    """ "Where do I live again?" right after "我下个月要去柏林出差。" is not about Berlin: its
    words made the Berlin turn answer "Where do I live?"; the turn after it is taken."""
    history = [
        msg(1, "我下个月要去柏林出差。"),
        msg(2, "Where do I live again?"),
        msg(3, "You live in Lisbon.", "assistant"),
    ]
    [berlin, question, _] = cut([], history)
    assert berlin.after is None
    assert question.after == "assistant: You live in Lisbon."
    history[1] = msg(2, "Where will you stay there?", "assistant")
    [berlin, _, _] = cut([], history)
    assert berlin.after == "assistant: Where will you stay there?"


def test_neighbours_further_than_a_rebuild_reads_are_left_out() -> None:
    """A rebuild reads 8 messages before a turn and 5 after it: a turn with more system
    messages between it and its neighbour is indexed without that neighbour, in a batch
    too, so the two agree."""
    history = [
        msg(1, "I opened my own car shop!"),
        *(msg(seq, "Be terse.", "system") for seq in range(2, 8)),
        msg(8, "Congrats!", "assistant"),
        *(msg(seq, "Be kind.", "system") for seq in range(9, 17)),
        msg(17, "Thanks!"),
    ]
    [shop, congrats, thanks] = cut([], history)
    assert shop.after is None  # 7 seqs on
    assert congrats.sparse_context == ["user: I opened my own car shop!"]  # 7 back
    assert congrats.after is None  # 9 on
    assert thanks.sparse_context == []  # 9 back


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
