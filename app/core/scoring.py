"""The retrieval score (docs/architecture.md §3), as pure functions (every term in [0, 1]).

`score = α·semantic + β·recency + γ·importance`, with the weights normalised to sum to 1 so
the score stays in [0, 1] whatever weights a request brings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

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


def recency(now: datetime, last_accessed_at: datetime, lambda_per_day: float) -> float:
    """`exp(-λ·Δdays)`; a future timestamp (clock skew, `as_of` replays) counts as now."""
    days = max(0.0, (now - last_accessed_at).total_seconds() / SECONDS_PER_DAY)
    return _unit(math.exp(-lambda_per_day * days))


def importance(intrinsic: float, access_count: int, max_access_count: int, share: float) -> float:
    """`w·intrinsic + (1−w)·access/max_access`: how much it was judged and found to matter."""
    used = access_count / max_access_count if max_access_count > 0 else 0.0
    return _unit(share * _unit(intrinsic) + (1 - share) * _unit(used))


def semantic_from_rrf(score: float, dense_weight: float, sparse_weight: float, k: int) -> float:
    """Normalise a fused score by the best one possible: rank one in every list.

    Qdrant's weighted RRF scales the rank, not the score: a list of weight `w` adds
    `1 / (k - 1 + rank / w)` (rank from 1), so rank one is worth `1 / (k - 1 + 1 / w)`.
    """
    best = sum(1.0 / (k - 1 + 1.0 / w) for w in (dense_weight, sparse_weight) if w > 0)
    return _unit(score / best) if best > 0 else 0.0


def combine(weights: Weights, semantic: float, recency_: float, importance_: float) -> float:
    w = weights.normalised()
    return _unit(w.semantic * semantic + w.recency * recency_ + w.importance * importance_)
