"""How recalls reinforce a memory (`app.core.reinforcement`): pure, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from app.core.reinforcement import Use, after_recalls

NOW = datetime(2025, 6, 1, tzinfo=UTC)


def test_each_recall_counts_one_access_and_adds_one_to_the_strength() -> None:
    before = Use(strength=1.0, access_count=0, last_accessed_at=None)
    assert after_recalls(before, 3, NOW) == Use(4.0, 3, NOW)


@given(
    st.floats(min_value=0, max_value=1e6),
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=1, max_value=1000),
)
def test_batched_recalls_equal_one_by_one(strength: float, count: int, times: int) -> None:
    start = Use(strength, count, None)
    one_by_one = start
    for _ in range(times):
        one_by_one = after_recalls(one_by_one, 1, NOW)
    batched = after_recalls(start, times, NOW)
    assert batched.access_count == one_by_one.access_count == count + times
    assert batched.last_accessed_at == NOW
    assert abs(batched.strength - one_by_one.strength) <= 1e-6 * max(1.0, strength)
    assert batched.strength > strength
