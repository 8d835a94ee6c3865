"""The forgetting view's geometry (app/console/charts.py): curves of R = exp(−t/S)."""

from __future__ import annotations

import math

from app.console.charts import HEIGHT, PAD, WIDTH, retention_chart


def _points(points: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in points.split())]


def test_each_curve_falls_from_one_and_its_dot_sits_on_it() -> None:
    chart = retention_chart([("fresh", 0.0, 7.0, "keep"), ("old", 25.0, 7.0, "forget")], 0.05, 7.0)
    for curve in chart.curves:
        pts = _points(curve.points)
        assert pts[0] == (PAD, PAD)  # R = 1 at t = 0
        assert [y for _, y in pts] == sorted(y for _, y in pts)
        assert PAD <= curve.x <= WIDTH - PAD
    fresh, old = chart.curves
    assert (fresh.x, fresh.y) == (PAD, PAD)
    expected = PAD + (HEIGHT - 2 * PAD) * (1 - math.exp(-25 / 7))
    assert abs(old.y - expected) < 1e-9
    assert old.y > chart.threshold_y  # below the threshold line: R < 0.05
    assert fresh.y < chart.threshold_y


def test_the_horizon_shows_where_an_unused_memory_crosses_the_threshold() -> None:
    chart = retention_chart([], 0.05, 7.0)
    assert chart.horizon_days >= -7.0 * math.log(0.05)  # ≈ 21 days
    assert chart.ticks[0][1] == "0"
    late = retention_chart([("late", 100.0, 7.0, "forget")], 0.05, 7.0)
    assert late.horizon_days >= 100.0
    assert late.curves[0].x < WIDTH - PAD
