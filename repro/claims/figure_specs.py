"""What a claims file's `figures:` and `sweep_fronts:` ask a report to draw, checked when the
file loads so that a mistake is refused there, naming the key, and not halfway through a
report (the drawing is `repro.report.plots` and `repro.report.sweep_front`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from repro.claims.calculators.registry import check_params
from repro.errors import UserError

KINDS = ("curves", "steps", "points", "drops")
REFERENCE_KEYS = {"x", "y", "label", "run", "x_times", "y_times", "role", "cross", "interpolate"}
ROLES = ("published", "target")  # a paper's number, or the value a claim measures against


def _check_reference(ref: Any) -> None:
    if (
        not isinstance(ref, dict)
        or not ({"x", "y", "x_times", "y_times"} & set(ref))
        or set(ref) - REFERENCE_KEYS
        or (({"x_times", "y_times"} & set(ref)) and "run" not in ref)
    ):
        raise UserError(
            f"reference {ref!r} must be a mapping of x and/or y, or of run and "
            "x_times and/or y_times (+ label, role, cross, interpolate)"
        )
    if ref.get("role", "published") not in ROLES:
        raise UserError(f"reference {ref!r}: role must be one of {', '.join(ROLES)}")
    if "cross" in ref and (ref["cross"] not in ("min", "max") or {"x", "x_times"} & set(ref)):
        raise UserError(
            f"reference {ref!r}: cross (min: falls to the line, max: rises to it) marks "
            "crossings of a horizontal line only (y or y_times, no x)"
        )
    if "interpolate" in ref and ("cross" not in ref or not isinstance(ref["interpolate"], bool)):
        raise UserError(
            f"reference {ref!r}: interpolate (true or false) says how a cross is read, as the "
            "claim reading it does; it needs cross"
        )


def _check_published(spec: FigureSpec) -> None:
    for entry in spec.published:
        if (
            not isinstance(entry, dict)
            or set(entry) != {"series", "x", "y", "label"}
            or entry["series"] not in spec.series
            or not isinstance(entry["x"], list)
            or not isinstance(entry["y"], list)
            or len(entry["x"]) != len(entry["y"])
        ):
            raise UserError(
                f"published {entry!r} must be {{series, x, y, label}} with series one of "
                f"{spec.series} and x, y lists of one length"
            )


@dataclass(frozen=True)
class FigureSpec:
    """One figure of a report: what to plot, over which runs, and how to scale the axes.

    `x` is "step", a clock ("modeled", "wall"), a metric, for `points` a config path
    ("trainer.batch_size") or "effective_batch", for `drops` "sends_per_parameter" or a
    config path ("method.cr"). `runs` is "all" or a list of labels. `reference`
    lines/markers: {y: v} horizontal, {x: v} vertical, {x, y} a marker; each with a `label`
    saying where the value comes from and a `role`: "published" (a paper's number, dotted
    black) or "target" (what a claim measures against, solid grey). A value stated relative
    to a run ("a third of sync's time") is {run: sync, x_times: 0.333}: a vertical line at
    that multiple of the run's last logged x (y_times: of its last smoothed y). `cross: min`
    (or max) on a horizontal line marks where each mean curve first falls (rises) to it: at
    the first logged point that reaches it, or with `interpolate: true` between that point
    and the one before, as the claim the figure shows reads its crossing.
    `panels`: [{title, runs: regex over labels (drops: over series)}], one axes each, one y
    axis; `baseline`: a label drawn in every panel. `published` (drops): the paper's values
    per series, [{series, x: [...], y: [...], label}]. `ylim`: [low, high]; a point beyond
    is marked at the edge with its value. `series_labels`: legend names of series keys.
    """

    id: str
    title: str
    y: str
    x: str = "step"
    kind: str = "curves"
    runs: Any = "all"
    logx: bool = False
    logy: bool = False
    invert_x: bool = False
    smooth: int = 1
    caption: str = ""
    xlabel: str = ""
    ylabel: str = ""
    reference: list = field(default_factory=list)
    measure: dict = field(default_factory=dict)
    series: list = field(default_factory=list)
    series_labels: dict = field(default_factory=dict)
    panels: list = field(default_factory=list)
    baseline: str = ""
    published: list = field(default_factory=list)
    ylim: Any = None
    headline: bool = False

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9_]+", str(self.id)):
            raise UserError(f"id '{self.id}' must be lower-case letters, digits and _")
        if self.kind not in KINDS:
            raise UserError(f"kind '{self.kind}' must be one of {', '.join(KINDS)}")
        if self.smooth < 1:
            raise UserError(f"smooth={self.smooth} must be an integer >= 1")
        if self.runs != "all" and not (
            isinstance(self.runs, list) and all(isinstance(r, str) for r in self.runs)
        ):
            raise UserError(f"runs={self.runs!r} must be 'all' or a list of labels")
        for ref in self.reference:
            _check_reference(ref)
        for panel in self.panels:
            if not isinstance(panel, dict) or set(panel) != {"title", "runs"}:
                raise UserError(f"panel {panel!r} must be {{title, runs: a label regex}}")
            try:
                re.compile(panel["runs"])
            except (re.error, TypeError) as err:
                raise UserError(f"panel {panel['title']!r}: runs is not a regex: {err}") from None
        if self.ylim is not None and not (
            isinstance(self.ylim, list)
            and len(self.ylim) == 2
            and all(isinstance(v, int | float) for v in self.ylim)
            and self.ylim[0] < self.ylim[1]
        ):
            raise UserError(f"ylim={self.ylim!r} must be [low, high] with low < high")
        _check_published(self)
        if self.kind == "drops" and not (self.series and self.measure.get("reference")):
            raise UserError("kind 'drops' needs series (run-label prefixes) and measure.reference")
        if self.kind == "points":
            params = {"run": "", "metric": self.y, **(self.measure.get("params") or {})}
            check_params(self.measure.get("calculator"), params)

    def selected(self, labels: list[str]) -> list[str]:
        return labels if self.runs == "all" else [lab for lab in labels if lab in self.runs]


@dataclass(frozen=True)
class SweepFrontSpec:
    id: str
    title: str
    spec: str
    x: str
    y: str
    param: str
    band: list = field(default_factory=list)
    band_label: str = ""
    chosen_run: str = ""
    chosen_metric: str = ""
    caption: str = ""

    def __post_init__(self) -> None:
        if self.band and (len(self.band) != 2 or not self.band[0] < self.band[1]):
            raise UserError(f"sweep_fronts {self.id}: band {self.band} must be [low, high]")
        if bool(self.chosen_run) != bool(self.chosen_metric):
            raise UserError(
                f"sweep_fronts {self.id}: chosen_run and chosen_metric go together; set both "
                "or neither"
            )
