"""Ebbinghaus forgetting (MemoryBank), as pure functions: retention, and the sweep's verdict
on one memory (docs/forgetting.md).

Retention `R = exp(−Δt / S)`: `Δt` is the days since the memory was last recalled or written
(stored, said again, edited, restored), whichever is later, `S` its stability in days. Not
since its event time: an imported history of last year is learned when it is imported, and
would otherwise be forgotten by the first sweep after the import. `S = base_days · growth^n` with
`n = strength − 1` the reinforcements it has had (`strength` starts at 1 and grows by one per
counted recall, `app.core.reinforcement`): each use makes the next forgetting slower.

A memory goes when both its retention and its importance are below the tenant's thresholds;
never when pinned (by a caller, or by `pin_after` reinforcements), never a summary.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any, Literal

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Policy:
    """A tenant's forgetting policy; the defaults are the documented ones."""

    enabled: bool = True
    base_days: float = 7.0  # S of a memory never reinforced
    growth: float = 2.0  # S multiplies by this with each reinforcement
    retention_threshold: float = 0.05  # R below this … (≈ 3 S without use)
    importance_threshold: float = 0.3  # … and importance below this: forgotten
    pin_after: int = 5  # reinforcements that make a memory permanent
    grace_days: float = 30.0  # a forgotten memory can be restored this long, then purged

    def with_changes(self, changes: dict[str, Any]) -> Policy:
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT = Policy()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the verdict reads of one memory."""

    strength: float
    access_count: int
    importance: float  # the sweep's blended importance (`importance`)
    pinned: bool
    created_at: datetime  # the event time (what the memory is about, not when it was learned)
    last_accessed_at: datetime | None
    stored_at: datetime | None = None  # its last write (`updated_at`); None: `created_at`


Verdict = Literal["keep", "forget", "pin"]


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    retention: float
    stability_days: float
    days_since_use: float
    importance: float

    def values(self, policy: Policy) -> dict[str, Any]:
        """The numbers that decided it, for the audit trail."""
        return {
            "retention": round(self.retention, 6),
            "stability_days": round(self.stability_days, 3),
            "days_since_use": round(self.days_since_use, 3),
            "importance": round(self.importance, 6),
            "retention_threshold": policy.retention_threshold,
            "importance_threshold": policy.importance_threshold,
        }


def importance(intrinsic: float, access_count: int, share: float) -> float:
    """The sweep's importance: `w·intrinsic + (1 − w)·n/(n + 1)`, `n` the uses.

    Recall's `scores.importance` divides `n` by the user's most-used memory instead; the
    sweep does not, because one memory recalled fifty times would make every other one's
    use vanish and the sweep forget memories that were used. `n/(n + 1)` makes the first
    use count most: used once, a memory of intrinsic importance above 0.22 stays (w = 0.7,
    threshold 0.3); never used, only above 0.43.
    """
    intrinsic = min(1.0, max(0.0, intrinsic))
    n = max(0, access_count)
    return share * intrinsic + (1 - share) * n / (n + 1)


def stability_days(strength: float, policy: Policy) -> float:
    """`S = base_days · growth^(strength − 1)`, capped so it stays a finite float."""
    n = max(0.0, strength - 1.0)
    return float(policy.base_days * policy.growth ** min(n, 60.0))


def retention(now: datetime, since: datetime, stability: float) -> float:
    """`exp(−Δdays / S)`; a `since` in the future counts as now."""
    days = max(0.0, (now - since).total_seconds() / SECONDS_PER_DAY)
    return math.exp(-days / stability) if stability > 0 else 0.0


def decide(m: Snapshot, now: datetime, policy: Policy) -> Decision:
    last = max(t for t in (m.last_accessed_at, m.stored_at or m.created_at) if t is not None)
    days = max(0.0, (now - last).total_seconds() / SECONDS_PER_DAY)
    s = stability_days(m.strength, policy)
    r = retention(now, last, s)
    verdict: Verdict = "keep"
    if not m.pinned and m.strength - 1 >= policy.pin_after:
        verdict = "pin"
    elif (
        not m.pinned
        and r < policy.retention_threshold
        and m.importance < policy.importance_threshold
    ):
        verdict = "forget"
    return Decision(verdict, r, s, days, m.importance)
