"""Scoring and decay maths (docs/architecture.md §3): every term and the total stay in [0, 1]."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core import scoring

unit = st.floats(min_value=0, max_value=1)
weight = st.floats(min_value=0, max_value=100)
days = st.floats(min_value=-3650, max_value=36500, allow_nan=False)
NOW = datetime(2025, 1, 1, tzinfo=UTC)


@given(days, st.floats(min_value=0, max_value=10))
def test_recency_is_in_unit_interval(delta_days: float, lam: float) -> None:
    value = scoring.recency(NOW, NOW - timedelta(days=delta_days), lam)
    assert 0.0 <= value <= 1.0


@given(st.floats(min_value=0, max_value=1000), st.floats(min_value=0, max_value=1000))
def test_recency_decays_with_age(a: float, b: float) -> None:
    older, newer = max(a, b), min(a, b)
    assert scoring.recency(NOW, NOW - timedelta(days=older), 0.05) <= scoring.recency(
        NOW, NOW - timedelta(days=newer), 0.05
    )


def test_recency_is_exponential() -> None:
    assert scoring.recency(NOW, NOW - timedelta(days=10), 0.1) == math.exp(-1.0)
    assert scoring.recency(NOW, NOW + timedelta(days=3), 0.1) == 1.0  # future counts as now


@given(unit, st.integers(0, 10_000), st.integers(0, 10_000), unit)
def test_importance_is_in_unit_interval(
    intrinsic: float, count: int, top: int, share: float
) -> None:
    assert 0.0 <= scoring.importance(intrinsic, count, top, share) <= 1.0


def test_importance_mixes_intrinsic_and_usage() -> None:
    assert scoring.importance(0.5, 0, 0, 0.7) == 0.35
    assert scoring.importance(0.5, 10, 10, 0.7) == pytest.approx(0.65)
    assert scoring.importance(1.0, 5, 10, 0.0) == 0.5


@given(
    st.floats(min_value=0, max_value=5), st.floats(0.01, 5), st.floats(0.01, 5), st.integers(1, 100)
)
def test_semantic_is_in_unit_interval(score: float, wd: float, ws: float, k: int) -> None:
    assert 0.0 <= scoring.semantic_from_rrf(score, wd, ws, k) <= 1.0


def test_rank_one_everywhere_is_full_relevance() -> None:
    k, wd, ws = 10, 0.3, 1.0
    best = 1 / (k - 1 + 1 / wd) + 1 / (k - 1 + 1 / ws)
    assert scoring.semantic_from_rrf(best, wd, ws, k) == 1.0
    assert scoring.semantic_from_rrf(best / 2, wd, ws, k) == 0.5


@given(weight, weight, weight, unit, unit, unit)
def test_combined_score_is_in_unit_interval(
    a: float, b: float, c: float, s: float, r: float, i: float
) -> None:
    assert 0.0 <= scoring.combine(scoring.Weights(a, b, c), s, r, i) <= 1.0


def test_weights_are_normalised() -> None:
    assert scoring.combine(scoring.Weights(2, 0, 0), 0.4, 1, 1) == 0.4
    assert scoring.combine(scoring.Weights(1, 1, 0), 1.0, 0.0, 1) == 0.5
    assert scoring.combine(scoring.Weights(0, 0, 0), 0.7, 0.1, 0.1) == 0.7
