"""The retry schedule of failed jobs and sessions: doubling, capped, jittered downwards."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.backoff import backoff_seconds

failures = st.integers(min_value=1, max_value=10_000)
share = st.floats(min_value=0, max_value=1, exclude_max=True)


def test_doubles_from_base_up_to_cap_without_jitter() -> None:
    waits = [backoff_seconds(n, base=1, cap=300, rand=lambda: 0.0) for n in range(1, 12)]
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]


def test_jitter_only_shortens_the_wait() -> None:
    assert backoff_seconds(3, base=1, cap=300, jitter=0.5, rand=lambda: 0.5) == 3.0
    assert backoff_seconds(3, base=1, cap=300, jitter=0.0, rand=lambda: 0.9) == 4.0


@given(failures, share, st.floats(min_value=0, max_value=1))
def test_wait_is_positive_and_never_over_the_cap(n: int, r: float, jitter: float) -> None:
    wait = backoff_seconds(n, base=0.5, cap=300, jitter=jitter, rand=lambda: r)
    assert 0 < wait <= 300
    assert wait >= (1 - jitter) * min(300, 0.5 * 2 ** min(n - 1, 62))


@given(failures, share)
def test_more_failures_never_wait_less_for_the_same_draw(n: int, r: float) -> None:
    assert backoff_seconds(n + 1, base=1, cap=300, rand=lambda: r) >= backoff_seconds(
        n, base=1, cap=300, rand=lambda: r
    )


def test_failures_count_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        backoff_seconds(0, base=1, cap=10)
