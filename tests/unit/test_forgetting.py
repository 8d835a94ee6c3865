"""Retention, stability and the sweep's verdict (`app.core.forgetting`), and which uses
reinforce (`app.core.reinforcement`): pure, no I/O."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.core import forgetting, reinforcement
from app.core.forgetting import DEFAULT, Policy, Snapshot, decide, retention, stability_days
from app.core.reinforcement import Use, after_useless, counts_as_use

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def snap(
    days_ago: float, importance: float, strength: float = 1.0, pinned: bool = False
) -> Snapshot:
    return Snapshot(
        strength=strength,
        access_count=int(strength - 1),
        importance=importance,
        pinned=pinned,
        created_at=NOW - timedelta(days=days_ago),
        last_accessed_at=None,
    )


def test_stability_grows_with_each_reinforcement() -> None:
    assert stability_days(1, DEFAULT) == 7.0
    assert stability_days(2, DEFAULT) == 14.0
    assert stability_days(4, DEFAULT) == 56.0


def test_retention_is_the_ebbinghaus_curve() -> None:
    assert retention(NOW, NOW, 7.0) == 1.0
    assert math.isclose(retention(NOW, NOW - timedelta(days=7), 7.0), math.exp(-1))
    assert retention(NOW, NOW + timedelta(days=1), 7.0) == 1.0  # the future counts as now


def test_unused_unimportant_memory_goes_after_about_three_stabilities() -> None:
    assert decide(snap(14, 0.1), NOW, DEFAULT).verdict == "keep"  # R = e^-2 ≈ 0.135
    d = decide(snap(30, 0.1), NOW, DEFAULT)  # R = e^-4.3 ≈ 0.014
    assert d.verdict == "forget"
    assert d.values(DEFAULT)["retention"] < DEFAULT.retention_threshold


def test_importance_or_a_pin_keeps_a_memory_however_old() -> None:
    assert decide(snap(3650, 0.5), NOW, DEFAULT).verdict == "keep"
    assert decide(snap(3650, 0.0, pinned=True), NOW, DEFAULT).verdict == "keep"


def test_reinforced_enough_is_pinned() -> None:
    assert decide(snap(3650, 0.0, strength=1 + DEFAULT.pin_after), NOW, DEFAULT).verdict == "pin"
    assert decide(snap(1, 0.0, strength=DEFAULT.pin_after), NOW, DEFAULT).verdict == "keep"


def test_a_reinforced_memory_lasts_longer() -> None:
    assert decide(snap(30, 0.1, strength=1), NOW, DEFAULT).verdict == "forget"
    assert decide(snap(30, 0.1, strength=3), NOW, DEFAULT).verdict == "keep"  # S = 28 d


def test_policy_changes_merge_over_the_defaults() -> None:
    p = DEFAULT.with_changes({"grace_days": 7.0})
    assert p == Policy(grace_days=7.0)
    assert p.as_dict()["base_days"] == DEFAULT.base_days


@given(
    st.floats(min_value=0, max_value=1e5),
    st.floats(min_value=1, max_value=1e3),
    st.floats(min_value=0, max_value=1),
)
def test_retention_lies_in_unit_interval_and_falls_with_time(
    days: float, strength: float, importance: float
) -> None:
    s = stability_days(strength, DEFAULT)
    r = retention(NOW, NOW - timedelta(days=days), s)
    later = retention(NOW + timedelta(days=1), NOW - timedelta(days=days), s)
    assert 0.0 <= later <= r <= 1.0
    assert forgetting.decide(snap(days, importance, strength), NOW, DEFAULT).retention == r


def test_only_relevant_results_whose_own_text_matched_are_used() -> None:
    assert counts_as_use(0.6, 0.9, floor=0.25)
    assert not counts_as_use(0.1, 0.9, floor=0.25)  # below the relevance floor
    assert not counts_as_use(0.6, 0.2, floor=0.25)  # found by its neighbour's words
    assert reinforcement.MIN_OWN_MATCH == 0.5


def test_useless_feedback_takes_strength_back_but_not_below_one() -> None:
    assert after_useless(Use(3.0, 2, NOW), 1) == Use(2.0, 2, NOW)
    assert after_useless(Use(1.5, 0, None), 5) == Use(1.0, 0, None)


def test_the_sweeps_importance_counts_the_first_use_most() -> None:
    assert forgetting.importance(0.3, 0, 0.7) == 0.7 * 0.3
    assert math.isclose(forgetting.importance(0.3, 1, 0.7), 0.21 + 0.15)
    assert forgetting.importance(0.3, 1, 0.7) >= DEFAULT.importance_threshold  # used: stays
    assert forgetting.importance(0.02, 1, 0.7) < DEFAULT.importance_threshold  # filler: not
    assert forgetting.importance(1.0, 10**6, 0.7) <= 1.0


def test_time_runs_from_the_last_write_or_use_not_the_event_time() -> None:
    """An imported turn of ten years ago is as fresh as the day it was stored."""
    imported = Snapshot(
        strength=1.0,
        access_count=0,
        importance=0.1,
        pinned=False,
        created_at=NOW - timedelta(days=3650),
        last_accessed_at=None,
        stored_at=NOW - timedelta(days=1),
    )
    assert decide(imported, NOW, DEFAULT).verdict == "keep"
    assert decide(imported, NOW + timedelta(days=30), DEFAULT).verdict == "forget"
    recalled = dataclasses.replace(imported, last_accessed_at=NOW + timedelta(days=20))
    assert decide(recalled, NOW + timedelta(days=30), DEFAULT).verdict == "keep"
    assert decide(recalled, NOW + timedelta(days=30), DEFAULT).days_since_use == 10.0
