"""Pareto-front arithmetic on objective vectors: dominance, knee point, hypervolume.

Plain functions on lists of floats so they are checked against hand-computed values. Every
function takes the objective directions and works internally in "minimise everything" form
(a maximised objective is negated), the convention of multi-objective optimisation texts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Point = Sequence[float]


def to_min(point: Point, directions: Sequence[str]) -> tuple[float, ...]:
    """The point in minimise-everything form."""
    return tuple(-v if d == "maximize" else v for v, d in zip(point, directions, strict=True))


def dominates(a: Point, b: Point) -> bool:
    """Minimisation dominance: a is no worse everywhere and better somewhere."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True)
    )


def pareto_indices(points: Sequence[Point], directions: Sequence[str]) -> list[int]:
    """Indices of the non-dominated points (equal points are all kept), in input order."""
    mins = [to_min(p, directions) for p in points]
    return [i for i, p in enumerate(mins) if not any(dominates(q, p) for q in mins)]


def knee_index(points: Sequence[Point], directions: Sequence[str]) -> int:
    """The knee of a front: the point closest (Euclidean) to the ideal point after scaling each
    objective to [0, 1] over the given points, 1 being the best value seen. An objective with no
    spread scales to 1 everywhere, so it does not move the choice."""
    if not points:
        raise ValueError("knee of an empty front")
    mins = [to_min(p, directions) for p in points]
    lows = [min(c) for c in zip(*mins, strict=True)]
    highs = [max(c) for c in zip(*mins, strict=True)]

    def distance(p: Sequence[float]) -> float:
        scaled = [
            (h - v) / (h - lo) if h > lo else 1.0 for v, lo, h in zip(p, lows, highs, strict=True)
        ]
        return math.dist(scaled, [1.0] * len(scaled))

    return min(range(len(mins)), key=lambda i: distance(mins[i]))


def reference_point(points: Sequence[Point], directions: Sequence[str]) -> tuple[float, ...]:
    """A hypervolume reference point just worse than every point: the worst value of each
    objective pushed out by 10% of its spread (or of its size, or by 1, if it has none), so
    every point, extreme ones included, adds volume."""
    mins = [to_min(p, directions) for p in points]
    ref = []
    for column in zip(*mins, strict=True):
        worst, spread = max(column), max(column) - min(column)
        ref.append(worst + 0.1 * (spread or abs(worst) or 1.0))
    return tuple(ref)


def hypervolume(points_min: Sequence[Point], ref: Point) -> float:
    """Volume dominated by minimisation points and bounded by `ref`, by slicing along the last
    objective (exact; fine for the tens of points and few objectives of a sweep)."""
    inside = [tuple(p) for p in points_min if all(x < r for x, r in zip(p, ref, strict=True))]
    # Dominated points add no volume; dropping them keeps the slicing small.
    pts = sorted(
        (p for p in inside if not any(dominates(q, p) for q in inside)), key=lambda p: p[-1]
    )
    if not pts:
        return 0.0
    if len(ref) == 1:
        return ref[0] - pts[0][0]
    volume = 0.0
    for i, p in enumerate(pts):
        upper = pts[i + 1][-1] if i + 1 < len(pts) else ref[-1]
        if upper > p[-1]:
            volume += (upper - p[-1]) * hypervolume([q[:-1] for q in pts[: i + 1]], ref[:-1])
    return volume


def hypervolume_history(
    points: Sequence[Point], directions: Sequence[str], ref: Sequence[float]
) -> list[float]:
    """Hypervolume of the first k points for k = 1..n (points in completion order)."""
    mins = [to_min(p, directions) for p in points]
    return [hypervolume(mins[: k + 1], ref) for k in range(len(mins))]
