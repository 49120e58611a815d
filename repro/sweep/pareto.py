"""What Optuna lacks for reading a multi-objective study: the knee point, the front of any
subset of trials, and a hypervolume reference point.

Optuna gives the whole study's front (`study.best_trials`) and computes hypervolumes
(`optuna.visualization.plot_hypervolume_history`); `pareto_indices` reproduces its dominance
rule (tested against `best_trials`) for the per-group fronts of `repro sweep show`. Plain
functions on lists of floats, so they are checked against hand-computed values. Every function
takes the objective directions and works internally in "minimise everything" form (a maximised
objective is negated), the convention of multi-objective optimisation texts.
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
    """A hypervolume reference point (minimise form) just worse than every point: the worst
    value of each objective pushed out by 10% of its spread (or of its size, or by 1, if it has
    none), so every point, extreme ones included, adds volume. Optuna asks the caller for one."""
    mins = [to_min(p, directions) for p in points]
    ref = []
    for column in zip(*mins, strict=True):
        worst, spread = max(column), max(column) - min(column)
        ref.append(worst + 0.1 * (spread or abs(worst) or 1.0))
    return tuple(ref)
