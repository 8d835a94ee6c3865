"""The embedded index's own document frequencies: counts in step with adds and removes,
and Qdrant's IDF formula on the query's terms."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from app.stores.term_counts import TermCounts

ANA, BO = ("t", "ana"), ("t", "bo")


def test_counts_follow_adds_and_removes_per_user() -> None:
    counts = TermCounts()
    counts.add(ANA, [1, 2, 2])  # a term twice in one point counts once
    counts.add(ANA, [2, 3])
    counts.add(BO, [1])
    assert (counts.points(ANA), counts.frequency(ANA, 2), counts.frequency(ANA, 1)) == (2, 2, 1)
    assert (counts.points(BO), counts.frequency(BO, 2)) == (1, 0)
    counts.remove(ANA, [1, 2])
    assert (counts.points(ANA), counts.frequency(ANA, 1), counts.frequency(ANA, 2)) == (1, 0, 1)
    counts.drop(ANA)
    assert counts.points(ANA) == 0
    assert counts.points(BO) == 1


def test_query_terms_are_weighed_by_the_users_idf_and_unknown_terms_left_out() -> None:
    counts = TermCounts()
    for terms in ([1, 2], [1], [1, 3], []):  # a point without terms still counts in N
        counts.add(ANA, terms)
    counts.add(BO, [9])
    indices, values = counts.weigh(ANA, [1, 3, 9], [1.0, 2.0, 5.0])

    def idf(n: int, total: int = 4) -> float:
        return math.log(1 + (total - n + 0.5) / (n + 0.5))

    assert indices == [1, 3]  # 9 is Bo's, none of Ana's points can match it
    assert values == [1.0 * idf(3), 2.0 * idf(1)]
    assert values[0] < 1.0 < values[1]  # a common term counts for less, a rare one for more
    assert counts.weigh(("t", "nobody"), [1], [1.0]) == ([], [])


@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 6), max_size=5)), max_size=40))
def test_removing_what_was_added_leaves_the_counts_of_what_remains(
    ops: list[tuple[bool, list[int]]],
) -> None:
    counts, kept = TermCounts(), []
    for keep, terms in ops:
        counts.add(ANA, terms)
        if keep:
            kept.append(terms)
        else:
            counts.remove(ANA, terms)
    assert counts.points(ANA) == len(kept)
    for term in range(7):
        assert counts.frequency(ANA, term) == sum(term in t for t in kept)
