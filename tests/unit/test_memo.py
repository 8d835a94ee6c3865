"""The text memo behind scoring's per-text caches: bounded by bytes, least recently used out."""

from __future__ import annotations

import sys
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.memo import TextMemo, text_memo


def counting(max_bytes: int, entry_bytes: int = 100) -> tuple[TextMemo[int], list[str]]:
    calls: list[str] = []

    def length(text: str, extra: int = 0) -> int:
        calls.append(text)
        return len(text) + extra

    return TextMemo(length, max_bytes, entry_bytes), calls


def test_a_text_is_computed_once_while_it_is_kept() -> None:
    memo, calls = counting(10_000)
    assert memo("hello") == 5
    assert memo("hello") == 5
    assert memo("hello", 1) == 6  # every argument is part of the key
    assert calls == ["hello", "hello"]
    assert len(memo) == 2


def test_the_least_recently_used_go_first_once_the_bytes_pass_the_budget() -> None:
    one = sys.getsizeof("a" * 50) + 100
    memo, calls = counting(3 * one)
    texts = ["a" * 50, "b" * 50, "c" * 50]
    for t in texts:
        memo(t)
    memo(texts[0])  # used again: now the newest
    memo("d" * 50)  # over budget: "b…" is the oldest
    assert len(memo) == 3
    assert memo.held_bytes == 3 * one
    calls.clear()
    memo(texts[0])
    memo(texts[2])
    assert calls == []
    memo(texts[1])
    assert calls == [texts[1]]


def test_wide_characters_cost_more_than_ascii() -> None:
    budget = 20 * sys.getsizeof("x" * 100)
    ascii_memo, _ = counting(budget, entry_bytes=0)
    chinese_memo, _ = counting(budget, entry_bytes=0)
    for i in range(40):
        ascii_memo(f"{i:03d}" + "x" * 97)
        chinese_memo(f"{i:03d}" + "记" * 97)
    assert len(ascii_memo) == 20
    # Two bytes a character, not one: 10 of them fit where 20 ASCII texts do.
    assert len(chinese_memo) == budget // sys.getsizeof("000" + "记" * 97) == 10


def test_a_text_over_the_whole_budget_is_computed_but_not_kept() -> None:
    memo, calls = counting(1_000)
    memo("small")
    assert memo("y" * 5_000) == 5_000
    assert memo("y" * 5_000) == 5_000
    assert calls.count("y" * 5_000) == 2
    assert len(memo) == 1  # and the small one was not pushed out for it


def test_a_varying_result_counts_too() -> None:
    @text_memo(10_000, entry_bytes=0, value_bytes=len)
    def chars(text: str) -> str:
        return text * 100

    chars("ab")
    assert chars.held_bytes == sys.getsizeof("ab") + 200


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(max_size=60), max_size=80),
    st.integers(min_value=0, max_value=4_000),
)
def test_any_sequence_stays_within_budget_and_answers_right(texts: list[str], budget: int) -> None:
    memo, _ = counting(budget, entry_bytes=50)
    for t in texts:
        assert memo(t) == len(t)
        assert memo.held_bytes <= budget
    kept = {t for t in texts if sys.getsizeof(t) + 50 <= budget}
    assert len(memo) <= len(kept)


def test_threads_share_it_safely() -> None:
    memo, _ = counting(200 * (sys.getsizeof("t" * 20) + 100))
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(2_000):
                text = f"{(i + offset) % 300:020d}"
                assert memo(text) == 20
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k * 37,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert memo.held_bytes <= memo.max_bytes
    assert memo.held_bytes == len(memo) * (sys.getsizeof("t" * 20) + 100)
