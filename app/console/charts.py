"""The console's plots as SVG geometry: pure functions, no I/O (the templates draw them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

WIDTH, HEIGHT, PAD = 960.0, 260.0, 32.0
STEPS = 48


@dataclass(frozen=True, slots=True)
class Curve:
    """One memory's retention `R = exp(−t / S)` over days since its last use."""

    label: str
    points: str  # an SVG polyline's `points`
    x: float  # where it is now
    y: float
    verdict: str


@dataclass(frozen=True, slots=True)
class RetentionChart:
    width: float
    height: float
    pad: float
    horizon_days: float
    threshold_y: float
    curves: list[Curve]
    ticks: list[tuple[float, str]]  # x, label (days)


def _x(t: float, horizon: float) -> float:
    return PAD + (WIDTH - 2 * PAD) * min(t, horizon) / horizon


def _y(r: float) -> float:
    return PAD + (HEIGHT - 2 * PAD) * (1.0 - max(0.0, min(1.0, r)))


def retention_chart(
    memories: Sequence[tuple[str, float, float, str]], threshold: float, base_days: float
) -> RetentionChart:
    """Curves of (label, days since use, stability S in days, verdict), against the sweep's
    retention threshold; the horizon shows every memory's present and where an unused one
    crosses the threshold (`−S·ln threshold`)."""
    crossing = -base_days * math.log(threshold) if 0 < threshold < 1 else 3 * base_days
    horizon = max(7.0, 1.25 * crossing, *(1.2 * days for _, days, _, _ in memories))
    curves = []
    for label, days, stability, verdict in memories:
        pts = []
        for i in range(STEPS + 1):
            t = horizon * i / STEPS
            r = math.exp(-t / stability) if stability > 0 else 0.0
            pts.append(f"{_x(t, horizon):.1f},{_y(r):.1f}")
        now = math.exp(-days / stability) if stability > 0 else 0.0
        curves.append(Curve(label, " ".join(pts), _x(days, horizon), _y(now), verdict))
    step = _nice_step(horizon / 6)
    ticks = [
        (_x(d, horizon), f"{d:g}") for d in (step * i for i in range(int(horizon // step) + 1))
    ]
    return RetentionChart(WIDTH, HEIGHT, PAD, horizon, _y(threshold), curves, ticks)


def _nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least `raw`."""
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 5, 10):
        if m * magnitude >= raw:
            return float(m * magnitude)
    return float(10 * magnitude)
