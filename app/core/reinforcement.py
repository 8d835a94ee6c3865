"""How use reinforces a memory: the rules applied when recalls and feedback are counted.

Each counted use of a memory is one access: `access_count` grows by one (the usage share of
importance, `app.core.scoring.importance`, reads it against the user's most-used memory),
`last_accessed_at` becomes the time of the flush (recency decays from it), and `strength`
grows by one, without a cap (its forgetting slows: `app.core.forgetting.stability_days`).
Counts are batched, so `times` uses arrive at once.

Which recall results count (`counts_as_use`): only those above the relevance floor whose
own text matched the query, not just the turns around it that its index entry carries: a
memory returned because it had to fill `top_k`, or because its neighbour was the answer, was
not used, and reinforcing it would feed a rich-get-richer loop.

Feedback that a memory was useless takes one strength back (never below 1) and does not
count as an access.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# Of the query's match, the share that must be the memory's own text (`ranking.own_match`).
MIN_OWN_MATCH = 0.5


@dataclass(frozen=True, slots=True)
class Use:
    strength: float
    access_count: int
    last_accessed_at: datetime | None


def counts_as_use(relevance: float, own_match: float, floor: float) -> bool:
    """Whether a recall result reinforces its memory."""
    return relevance >= floor and own_match >= MIN_OWN_MATCH


def after_recalls(before: Use, times: int, now: datetime) -> Use:
    """A memory's use after `times` more recalls, counted at `now`."""
    return Use(
        strength=before.strength + times,
        access_count=before.access_count + times,
        last_accessed_at=now,
    )


def after_useless(before: Use, times: int) -> Use:
    """A memory's use after `times` reports that it did not help."""
    return Use(
        strength=max(1.0, before.strength - times),
        access_count=before.access_count,
        last_accessed_at=before.last_accessed_at,
    )
