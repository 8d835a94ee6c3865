"""Exponential backoff with jitter: how long a failed job, or a session whose promotion
failed, waits before its next try.

The jitter spreads out retries of work that failed together (a provider down for every
session at once), so that it does not all come back in the same instant.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# 2**62 seconds is past any cap: a larger exponent only risks float overflow.
_MAX_EXPONENT = 62


def backoff_seconds(
    failures: int,
    *,
    base: float,
    cap: float,
    jitter: float = 0.5,
    rand: Callable[[], float] = random.random,
) -> float:
    """The wait after the `failures`-th failure in a row: `base · 2^(failures-1)`, at most
    `cap`, less a random share of up to `jitter` of it (so within `[(1-jitter)·d, d]`)."""
    if failures < 1:
        raise ValueError("failures counts from 1")
    ceiling = min(cap, base * 2.0 ** min(failures - 1, _MAX_EXPONENT))
    return ceiling * (1 - jitter * rand())
