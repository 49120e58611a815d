"""Tables that put a paper's published numbers beside ours, run by run (e.g. Flexible Top-k's
Table IV: step time and final accuracy per method and compression ratio).

A claims file lists them under `tables:`; each row names one of our runs by label and the
published values it stands beside. Our columns, each the mean over the run's seeds: the mean
modeled step time (last logged modeled time over the last step, probing included), its ratio
to the reference run's, the final test accuracy (mean of the last `smooth` logged points, in
%); and which ratios and collectives the run logged in any seed. Published columns: step
time, its ratio to the reference row's published step time, top-1 accuracy, and where the
numbers come from. Ratios make the two comparable when the networks differ (ours follows the
experiment's network schedule, the paper's table one fixed link).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from repro.errors import UserError
from repro.pages.writer import Table, fmt
from repro.spec_loader import build
from repro.track.series import NotMeasurable, Run, Seeded, cfg, final, final_step, points


@dataclass(frozen=True)
class PublishedRow:
    """One of our runs (`run`, a label) and the published numbers beside it (None: not
    published)."""

    run: str
    source: str
    step_ms: float | None = None
    acc: float | None = None


@dataclass(frozen=True)
class PublishedTable:
    """`rows` against `reference` (the label whose step time the ratios divide by)."""

    id: str
    title: str
    reference: str
    rows: list
    caption: str = ""
    smooth: int = 1
    parsed: list = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if not self.rows:
            raise UserError(f"table '{self.id}': rows must be a non-empty list")
        if self.smooth < 1:
            raise UserError(f"table '{self.id}': smooth={self.smooth!r} must be an integer >= 1")
        parsed = [
            build(PublishedRow, r, f"table '{self.id}' rows[{i}]") for i, r in enumerate(self.rows)
        ]
        if self.reference not in [row.run for row in parsed]:
            raise UserError(f"table '{self.id}': reference '{self.reference}' is not a row's run")
        object.__setattr__(self, "parsed", parsed)


HEADERS = [
    "method",
    "label",
    "CR (logged)",
    "collectives logged",
    "ours: step (ms, modeled, mean over seeds)",
    "ours: step / reference",
    "ours: test acc (%, mean over seeds)",
    "published: step (ms)",
    "published: step / reference",
    "published: top-1 (%)",
    "published source",
]


def _mean(runs: Mapping[int, Run], value: Callable[[Run], float]) -> float | None:
    """The mean over seeds of `value`, None when a seed lacks it."""
    try:
        values = [value(r) for r in runs.values()]
    except NotMeasurable:
        return None
    return sum(values) / len(values) if values else None


def _step_ms(runs: Mapping[int, Run]) -> float | None:
    return _mean(runs, lambda r: 1e3 * final(r, "time/modeled_s") / final_step(r))


def _ratio(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else value / reference


def _ratios(runs: Mapping[int, Run]) -> str:
    """The compression ratio the run logged: one value, or the range a controller moved in
    (over all seeds)."""
    logged = [float(c) for r in runs.values() for c in points(r, "method/cr")[1]]
    if not logged:
        return fmt(cfg(next(iter(runs.values())), "method.cr"))
    low, high = min(logged), max(logged)
    return fmt(low) if low == high else f"{fmt(low)} to {fmt(high)}"


def _collectives(runs: Mapping[int, Run]) -> str:
    logged = [str(v) for r in runs.values() for v in points(r, "method/collective")[1]]
    return ", ".join(dict.fromkeys(logged)) or "—"


def render_table(spec: PublishedTable, runs: Seeded, name: Callable[[str], str]) -> Table:
    """The spec as a page table; rows whose run is absent say "not run"."""
    ref_runs = runs.get(spec.reference)
    ref_ours = None if not ref_runs else _step_ms(ref_runs)
    ref_pub = next(row.step_ms for row in spec.parsed if row.run == spec.reference)
    rows = []
    for row in spec.parsed:
        seeded = runs.get(row.run)
        if not seeded:
            ours = ["—", "not run", "—", "—", "—"]
        else:
            step = _step_ms(seeded)
            ours = [
                _ratios(seeded),
                _collectives(seeded),
                fmt(step),
                fmt(_ratio(step, ref_ours)),
                fmt(_mean(seeded, lambda r: 100 * final(r, "test/acc", spec.smooth))),
            ]
        published = [fmt(row.step_ms), fmt(_ratio(row.step_ms, ref_pub)), fmt(row.acc), row.source]
        rows.append([name(row.run), row.run, *ours, *published])
    return Table(spec.title, HEADERS, rows)
