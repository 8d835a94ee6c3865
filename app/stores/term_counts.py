"""Per-user document frequencies of the sparse terms: the IDF of the embedded index's BM25.

Qdrant can weigh a sparse query by IDF over a filtered corpus (`IdfParams(corpus=user)`),
but it counts that corpus anew on every search: ~5.7 of a 5.8 ms search at 100k memories
(bench/HISTORY.md, "Where a recall's time goes at 100k"). The embedded index is its shard's
only writer, so it keeps the counts itself, in step with every write under the shard's
lock, and weighs the query's terms before the search; its sparse vector carries no IDF
modifier. The weights are Qdrant's own, so the scores and the ranking are the same:
idf = ln(1 + (N - n + 0.5) / (n + 0.5)), N the user's points (with terms or without), n
those holding the term.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

UserKey = tuple[str, str]  # (tenant_id, user_id)


@dataclass(slots=True)
class _UserCounts:
    points: int = 0
    frequencies: dict[int, int] = field(default_factory=dict)


class TermCounts:
    """How many of each user's points hold each term. Not thread-safe: the index calls it
    under its shard lock."""

    def __init__(self) -> None:
        self._users: dict[UserKey, _UserCounts] = {}

    def add(self, user: UserKey, terms: Iterable[int]) -> None:
        counts = self._users.get(user)
        if counts is None:
            counts = self._users[user] = _UserCounts()
        counts.points += 1
        frequencies = counts.frequencies
        for term in set(terms):
            frequencies[term] = frequencies.get(term, 0) + 1

    def remove(self, user: UserKey, terms: Iterable[int]) -> None:
        counts = self._users.get(user)
        if counts is None:
            return
        counts.points -= 1
        if counts.points <= 0:
            del self._users[user]
            return
        frequencies = counts.frequencies
        for term in set(terms):
            left = frequencies.get(term, 0) - 1
            if left > 0:
                frequencies[term] = left
            else:
                frequencies.pop(term, None)

    def drop(self, user: UserKey) -> None:
        self._users.pop(user, None)

    def clear(self) -> None:
        self._users.clear()

    def points(self, user: UserKey) -> int:
        counts = self._users.get(user)
        return counts.points if counts is not None else 0

    def frequency(self, user: UserKey, term: int) -> int:
        counts = self._users.get(user)
        return counts.frequencies.get(term, 0) if counts is not None else 0

    def weigh(
        self, user: UserKey, indices: Sequence[int], values: Sequence[float]
    ) -> tuple[list[int], list[float]]:
        """The query's terms times their IDF over `user`'s points. A term none of them
        holds is left out: it can match none of them, and its posting list (other users'
        points) would be walked for nothing."""
        counts = self._users.get(user)
        if counts is None:
            return [], []
        n_points = counts.points
        frequencies = counts.frequencies
        out_indices: list[int] = []
        out_values: list[float] = []
        for term, value in zip(indices, values, strict=True):
            n = frequencies.get(term, 0)
            if n:
                out_indices.append(term)
                out_values.append(value * math.log(1.0 + (n_points - n + 0.5) / (n + 0.5)))
        return out_indices, out_values
