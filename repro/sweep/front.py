"""A study's Pareto front as data: every completed trial, the front, its knee, the colour of each
point, and the front as a CSV table.

Every figure of a front (`repro sweep show`'s `pareto.png` and interactive `pareto.html`, the Top-k
report's CR front) is drawn from one `Front`, so they agree on which trials are on the front, which
is the knee and which colour a point has. The front is Optuna's own `study.best_trials` (its
non-dominated completed trials); the knee is `knee_index`. Points are coloured by one categorical
search parameter (the spec's `group_by`, else its first categorical key: the collective of the Top-k
CR sweep), one colour per choice in the order the spec lists them, so a collective has the same
colour in every figure of every study that searches the same choices.

Optuna computes hypervolumes but not the knee, the hypervolume reference point it asks for, nor
the fronts of part of a study (`repro sweep show`'s per-group fronts: `pareto_indices`, its
dominance rule, tested against `best_trials`): those are plain functions on lists of floats here,
in the "minimise everything" form of multi-objective optimisation texts (a maximised objective is
negated), checked against hand-computed values.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.sweep.space import ParamSpec
from repro.sweep.spec import SweepSpec
from repro.sweep.study import completed

# Okabe and Ito's colour-blind-safe palette, the choices of the colour parameter in order
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
OTHER = "#9a9a9a"
"""A point whose colour parameter has no colour (more choices than the palette, or none)."""
TRIAL = "trial"
"""The x axis of a single-objective study's figure with no one searched number: the trial
number."""

Point = Sequence[float]


def result_words(spec: SweepSpec) -> tuple[str, str]:
    """What `repro sweep show` finds and the point it marks: a Pareto front and its knee, or
    with one objective the best trial."""
    return ("Pareto front", "knee") if len(spec.objectives) > 1 else ("best trial", "best")


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


def group_front(spec: SweepSpec, trials: list[Any]) -> list[Any]:
    """The non-dominated trials among `trials` (Optuna only gives a whole study's front)."""
    return [trials[i] for i in pareto_indices([t.values for t in trials], spec.directions)]


def knee_index(points: Sequence[Point], directions: Sequence[str]) -> int:
    """The knee of a front: the point closest (Euclidean) to the ideal point after scaling each
    objective to [0, 1] over the given points, 1 being the best value seen. An objective with no
    spread scales to 1 everywhere, so it does not move the choice."""
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
    columns = zip(*(to_min(p, directions) for p in points), strict=True)
    return tuple(max(c) + 0.1 * ((max(c) - min(c)) or abs(max(c)) or 1.0) for c in columns)


def row_of(spec: SweepSpec, trial: Any) -> dict[str, Any]:
    """A completed trial as `{trial, params, values}`, its values named by metric."""
    return {
        "trial": trial.number,
        "params": dict(trial.params),
        "values": dict(zip(spec.metric_names, trial.values, strict=True)),
    }


def front_rows(spec: SweepSpec, front: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """Front trials as rows ordered by the first objective, and the knee's index (-1: none)."""
    front = sorted(front, key=lambda t: (t.values[0], t.number))
    if not front:
        return [], -1
    return [row_of(spec, t) for t in front], knee_index([t.values for t in front], spec.directions)


@dataclass(frozen=True)
class Front:
    """Completed trials (`trials`), the non-dominated ones (`front`, ordered by the first
    objective) and the knee's index in `front`; rows are `{trial, params, values}`."""

    spec: SweepSpec
    trials: list[dict[str, Any]]
    front: list[dict[str, Any]]
    knee: int

    @property
    def knee_row(self) -> dict[str, Any]:
        return self.front[self.knee]

    @property
    def colour_by(self) -> str | None:
        """The categorical parameter points are coloured by: `group_by`, else the first one."""
        if self.spec.group_by is not None:
            return self.spec.group_by
        return next((p.key for p in self.spec.space if p.type == "categorical"), None)

    def colours(self) -> dict[Any, str]:
        """Each choice of the colour parameter and its colour, in the spec's order."""
        key = self.colour_by
        if key is None:
            return {}
        choices = next(p.choices for p in self.spec.space if p.key == key)
        return {c: PALETTE[i] if i < len(PALETTE) else OTHER for i, c in enumerate(choices)}

    def colour(self, row: dict[str, Any]) -> str:
        if self.colour_by is None:
            return PALETTE[0]
        return self.colours().get(row["params"].get(self.colour_by), OTHER)

    def table(self, mark_head: str, mark: str) -> tuple[list[str], list[list[Any]]]:
        """The front as a table's head and rows: trial number, `mark` on the knee, then the
        parameters and objectives (the CSV file and the page's table both write it)."""
        keys = [p.key for p in self.spec.space]
        rows = [
            [r["trial"], mark if i == self.knee else "", *(r["params"].get(k, "") for k in keys)]
            + list(r["values"].values())
            for i, r in enumerate(self.front)
        ]
        return [TRIAL, mark_head, *keys, *self.spec.metric_names], rows

    def dominated(self) -> list[dict[str, Any]]:
        on_front = {r["trial"] for r in self.front}
        return [r for r in self.trials if r["trial"] not in on_front]

    @property
    def ring_word(self) -> str:
        """What the ring marks: the knee of a front, the best trial of one objective."""
        return result_words(self.spec)[1]

    @property
    def other_word(self) -> str:
        return "other trials" if len(self.spec.metric_names) == 1 else "dominated trials"

    @property
    def searched(self) -> ParamSpec | None:
        """The space's one number (int or float), or None: with one objective the figure
        plots against it, a tuning curve (`adasum_lr`'s accuracy against the learning rate,
        one colour per combiner), rather than against the order trials ran in."""
        numbers = [p for p in self.spec.space if p.type != "categorical"]
        return numbers[0] if len(numbers) == 1 else None

    def axes(self) -> tuple[str, str]:
        """(x, y) of the front's figure: the second objective against the first (the first
        being the quality a sweep is about, e.g. accuracy, it goes up the page); one
        objective: its value against the searched number, else the trial number."""
        names = self.spec.metric_names
        if len(names) > 1:
            return names[1], names[0]
        return (TRIAL if self.searched is None else self.searched.key), names[0]

    def log_x(self) -> bool:
        """Whether the x axis is a number searched on a log scale."""
        return self.searched is not None and len(self.spec.metric_names) == 1 and self.searched.log


def coordinate(row: dict[str, Any], key: str) -> float:
    """A row's position on axis `key`: an objective's value, a searched number's or, for
    `TRIAL`, the trial's number."""
    if key == TRIAL:
        return float(row["trial"])
    return float(row["values"][key] if key in row["values"] else row["params"][key])


def coordinates(rows: list[dict[str, Any]], x: str, y: str) -> tuple[list[float], list[float]]:
    """The rows' positions on axes `x` and `y`, as a scatter takes them."""
    return [coordinate(r, x) for r in rows], [coordinate(r, y) for r in rows]


def front_of(spec: SweepSpec, study: Any) -> Front:
    """The `Front` of a loaded study (its `front` empty when no trial has completed)."""
    rows, knee = front_rows(spec, study.best_trials)
    return Front(spec, [row_of(spec, t) for t in completed(study)], rows, knee)


def write_csv(front: Front, path: Path) -> Path:
    """Every front trial, one row each: its number, whether it is the knee, its parameters
    and its objectives (floats written at full precision: the table holds the study's own
    values)."""
    head, rows = front.table("knee", "yes")
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([head, *rows])
    return path
