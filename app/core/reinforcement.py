"""How use reinforces a memory: the rule applied when recalls are counted.

Each recall of a memory is one access: `access_count` grows by one (the usage share of
importance, `app.core.scoring.importance`, reads it against the user's most-used memory),
`last_accessed_at` becomes the time of the flush (recency decays from it), and `strength`
grows by one, without a cap. Counts are batched, so `times` recalls arrive at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Use:
    strength: float
    access_count: int
    last_accessed_at: datetime | None


def after_recalls(before: Use, times: int, now: datetime) -> Use:
    """A memory's use after `times` more recalls, counted at `now`."""
    return Use(
        strength=before.strength + times,
        access_count=before.access_count + times,
        last_accessed_at=now,
    )
