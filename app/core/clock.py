"""The clock services read "now" from: the real one, or a test's or a simulation's, so that
months of forgetting can pass in a second (bench/forgetting.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)
