"""The retrieval score (docs/architecture.md §3), as pure functions (every term in [0, 1]).

`score = α·semantic + β·recency + γ·importance`, with the weights normalised to sum to 1 so
the score stays in [0, 1] whatever weights a request brings. Each formula is written once,
over numpy arrays of candidates (recall scores a whole pool at a time); the float forms
are that formula over an array of one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.float64]

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Weights:
    semantic: float
    recency: float
    importance: float

    def normalised(self) -> Weights:
        total = self.semantic + self.recency + self.importance
        if total <= 0:
            return Weights(1.0, 0.0, 0.0)
        return Weights(self.semantic / total, self.recency / total, self.importance / total)


def _unit(x: float) -> float:
    if math.isnan(x):
        return 0.0
    return min(1.0, max(0.0, x))


def unit_interval(x: Floats) -> Floats:
    """Each value clipped to [0, 1], NaN read as 0."""
    out: Floats = np.clip(np.nan_to_num(x, nan=0.0), 0.0, 1.0)
    return out


def recency_many(age_seconds: Floats, lambda_per_day: float) -> Floats:
    """`exp(-λ·Δdays)` of each age since last access; a negative age (clock skew, `as_of`
    replays) counts as now."""
    days = np.maximum(0.0, age_seconds / SECONDS_PER_DAY)
    return unit_interval(np.exp(-lambda_per_day * days))


def recency(now: datetime, last_accessed_at: datetime, lambda_per_day: float) -> float:
    """`recency_many` of one memory."""
    age = np.array([(now - last_accessed_at).total_seconds()])
    return float(recency_many(age, lambda_per_day)[0])


def importance_many(
    intrinsic: Floats, access_count: Floats, max_access_count: int, share: float
) -> Floats:
    """`w·intrinsic + (1−w)·access/max_access`: how much it was judged and found to matter."""
    unused = max_access_count <= 0  # none of the user's memories used yet
    used = np.zeros(len(access_count)) if unused else access_count / max_access_count
    return unit_interval(share * unit_interval(intrinsic) + (1 - share) * unit_interval(used))


def importance(intrinsic: float, access_count: int, max_access_count: int, share: float) -> float:
    """`importance_many` of one memory."""
    one = importance_many(
        np.array([intrinsic]), np.array([float(access_count)]), max_access_count, share
    )
    return float(one[0])


def semantic_from_rrf(score: float, dense_weight: float, sparse_weight: float, k: int) -> float:
    """Normalise a fused score by the best one possible: rank one in every list.

    Qdrant's weighted RRF scales the rank, not the score: a list of weight `w` adds
    `1 / (k - 1 + rank / w)` (rank from 1), so rank one is worth `1 / (k - 1 + 1 / w)`.
    """
    best = sum(1.0 / (k - 1 + 1.0 / w) for w in (dense_weight, sparse_weight) if w > 0)
    return _unit(score / best) if best > 0 else 0.0


def combine_many(
    weights: Weights, semantic: Floats, recency_: Floats, importance_: Floats
) -> Floats:
    """The composite score of each candidate, the weights normalised first."""
    w = weights.normalised()
    return unit_interval(w.semantic * semantic + w.recency * recency_ + w.importance * importance_)


def combine(weights: Weights, semantic: float, recency_: float, importance_: float) -> float:
    """`combine_many` of one candidate."""
    one = combine_many(weights, np.array([semantic]), np.array([recency_]), np.array([importance_]))
    return float(one[0])
