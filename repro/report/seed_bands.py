"""The mean over seeds of one method's curve, with the band the seeds span, as figures draw it.

Seeds log at different x values on a clock (each seed's modeled step times are sampled), so
the seeds are put on one grid first: the union of every seed's logged x values inside the
range all of them cover, from the latest first point to the earliest last point. Each seed
is read on that grid by linear interpolation between its own logged points (at its own
points, its logged value). The mean is the arithmetic mean of the seeds at each grid x; the
band runs from the lowest to the highest seed there, so every seed lies inside it. Beyond
the shortest seed (a run that stopped at its target, or one still running) there is no mean:
the seeds' own lines go on alone, rather than a mean whose membership changes along x.

A crossing is where the mean first reaches a target line, read as the claim the figure
shows reads it: at the first grid point that reaches it (`first_reach`), or linear between
the last grid point short of it and the first that reaches it (`reach_interpolated`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from repro.claims.calculators.time_to_target import first_reach, reach_interpolated

Curve = tuple[Sequence[float], Sequence[float]]


@dataclass(frozen=True)
class SeedBand:
    """A method's seeds on one grid: mean, lowest and highest seed at each grid x."""

    grid: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]
    seeds: int

    def crossing(self, target: float, mode: str, interpolate: bool = False) -> float:
        """The first x at which the mean reaches `target` (mode "min": falls to it, "max":
        rises to it), interpolated or not; `inf` when it never does."""
        reach = reach_interpolated if interpolate else first_reach
        return reach(self.grid, self.mean, target, mode)


def interpolate(xs: Sequence[float], ys: Sequence[float], grid: Sequence[float]) -> list[float]:
    """The curve through (xs, ys) read at each grid x, linear between the bracketing points;
    grid values must lie within [min(xs), max(xs)]."""
    pairs = sorted(zip(xs, ys, strict=True))
    out = []
    i = 0
    for x in grid:
        while i + 1 < len(pairs) and pairs[i + 1][0] <= x:
            i += 1
        x0, y0 = pairs[i]
        if x0 == x or i + 1 == len(pairs):
            out.append(float(y0))
            continue
        x1, y1 = pairs[i + 1]
        out.append(y0 + (x - x0) / (x1 - x0) * (y1 - y0))
    return out


def seed_band(curves: Sequence[Curve]) -> SeedBand | None:
    """The seeds' mean and range on their common grid: the union of their x values inside
    the range every seed covers; None when the seeds share no x range (or none logged
    anything)."""
    drawn = [(xs, ys) for xs, ys in curves if len(xs)]
    if not drawn:
        return None
    start = max(min(xs) for xs, _ in drawn)
    end = min(max(xs) for xs, _ in drawn)
    grid = sorted({float(x) for xs, _ in drawn for x in xs if start <= x <= end})
    if not grid:
        return None
    columns = [interpolate(xs, ys, grid) for xs, ys in drawn]
    rows = list(zip(*columns, strict=True))
    return SeedBand(
        grid=grid,
        mean=[math.fsum(row) / len(row) for row in rows],
        low=[min(row) for row in rows],
        high=[max(row) for row in rows],
        seeds=len(columns),
    )
