"""Report figures: what a claims file's `figures:` asks for, and the file each becomes.

A `FigureSpec` says what to draw; `draw_figure` reads the runs (label -> seed -> run) and
writes the file, SVG (or PNG at twice the screen resolution when the path ends in .png).
Kinds: `curves` (a metric against step or a clock: every seed as a faint line, the mean over
seeds with the band the seeds span, `seed_bands`), `steps` (a piecewise-constant metric such
as tau, or a categorical one such as the chosen collective, one step line per seed),
`points` (one number per run, computed by a calculator, against a config value such as the
effective batch; one series per setting) and `drops` (accuracy drop below a reference run
against c x steps or the ratio c); both of the last in `point_plots`. `panels` splits a
figure into small multiples with one y axis (one per method family, where one axis would
hold more lines than a reader can follow), `baseline` repeats one run in every panel.
Colours and line styles come from `colours` (keyed by run label), so a method looks the same
in every report; the layout, legends and reference lines from `canvas`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from repro.errors import UserError
from repro.report import by_setting, time_to_target  # noqa: F401  (registers their calculators)
from repro.report.calculators import check_params
from repro.report.series import (
    Run,
    Seeded,
    every_run,
    points,
    seeds_of,
    trailing_mean,
    x_metric,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KINDS = ("curves", "steps", "points", "drops")
REFERENCE_KEYS = {"x", "y", "label", "run", "x_times", "y_times", "role", "cross"}
ROLES = ("published", "target")  # a paper's number, or the value a claim measures against

AXIS_LABELS = {
    "step": "step (optimizer steps)",
    "time/modeled_s": "modeled time (s)",
    "time/wall_s": "wall-clock time (s)",
    "train/loss": "training loss (cross-entropy)",
    "test/loss": "test loss (cross-entropy)",
    "test/acc": "test accuracy (fraction)",
    "method/tau": "communication period tau (local steps)",
    "method/cr": "compression ratio c (fraction kept)",
    "method.cr": "compression ratio c (fraction kept)",
    "method/collective": "collective",
    "method/gain": "compression gain",
    "comm/bytes": "payload sent (cumulative, bytes)",
    "lr": "learning rate",
    "epoch": "epoch (passes over the training set)",
    "samples": "samples processed (all workers)",
    "comm/collectives": "collectives issued (cumulative count)",
    "comm/measured_s": "measured communication time (cumulative, s)",
    "throughput/samples_per_s": "throughput (samples/s, wall clock)",
    "throughput/modeled_samples_per_s": "throughput (samples/s, modeled clock)",
    "effective_batch": "effective batch (workers x batch per worker)",
    "sends_per_parameter": "c x steps (times each parameter is sent, on average)",
}

CLOCK_SENTENCES = {
    "time/modeled_s": "x axis: modeled clock (sampled compute times plus the alpha-beta "
    "network model), seconds.",
    "time/wall_s": "x axis: measured wall clock on this machine, seconds.",
    "step": "x axis: optimizer steps (no clock).",
    "sends_per_parameter": "x axis: c x steps, the fraction kept times the steps (no clock).",
}


def axis_label(name: str) -> str:
    return AXIS_LABELS.get(name, name)


def _check_reference(ref: Any) -> None:
    if (
        not isinstance(ref, dict)
        or not ({"x", "y", "x_times", "y_times"} & set(ref))
        or set(ref) - REFERENCE_KEYS
        or (({"x_times", "y_times"} & set(ref)) and "run" not in ref)
    ):
        raise UserError(
            f"reference {ref!r} must be a mapping of x and/or y, or of run and "
            "x_times and/or y_times (+ label, role, cross)"
        )
    if ref.get("role", "published") not in ROLES:
        raise UserError(f"reference {ref!r}: role must be one of {', '.join(ROLES)}")
    if "cross" in ref and (ref["cross"] not in ("min", "max") or {"x", "x_times"} & set(ref)):
        raise UserError(
            f"reference {ref!r}: cross (min: falls to the line, max: rises to it) marks "
            "crossings of a horizontal line only (y or y_times, no x)"
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
    (or max) on a horizontal line marks where each mean curve first falls (rises) to it.
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
        if not isinstance(self.smooth, int) or self.smooth < 1:
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

    def clock_sentence(self) -> str:
        """Which clock the x axis uses, for the caption."""
        if self.kind in ("points", "drops") and self.x != "sends_per_parameter":
            return f"x axis: run setting '{self.x}'."
        return CLOCK_SENTENCES.get(x_metric(self.x), f"x axis: '{x_metric(self.x)}'.")

    def selected(self, labels: list[str]) -> list[str]:
        return labels if self.runs == "all" else [lab for lab in labels if lab in self.runs]


Namer = Callable[[str], str]


def resolve_reference(ref: dict, spec: FigureSpec, runs: Seeded) -> dict | None:
    """`ref` with x_times / y_times turned into numbers from its run's last logged point (the
    mean over its seeds; y smoothed by the figure's `smooth`, as the claims read a final
    value); None when that run is absent or logged nothing on this figure's axes."""
    if "run" not in ref:
        return ref
    lasts = []
    for run in runs.get(ref["run"], {}).values():
        xs, ys = points(run, spec.y, spec.x)
        if ys and not any(isinstance(y, str) for y in ys):
            lasts.append((xs[-1], trailing_mean([float(y) for y in ys], spec.smooth)[-1]))
    if not lasts:
        return None
    out = {k: v for k, v in ref.items() if k in ("x", "y", "label", "role", "cross")}
    if "x_times" in ref:
        out["x"] = ref["x_times"] * sum(x for x, _ in lasts) / len(lasts)
    if "y_times" in ref:
        out["y"] = ref["y_times"] * sum(y for _, y in lasts) / len(lasts)
    return out


def seeds_sentence(kind: str, runs: Seeded) -> str:
    """How the figure shows the seeds, for the caption."""
    seeds = seeds_of(runs)
    listed = ", ".join(map(str, seeds))
    if len(seeds) <= 1:
        return f"One seed ({listed or 'none'})."
    if kind in ("points", "drops"):
        return (
            f"{len(seeds)} seeds ({listed}): a small dot per seed; the line joins the means "
            "over the seeds and the shaded band spans the lowest to the highest seed (no "
            "mean where a seed never got there)."
        )
    if kind == "steps":
        return f"{len(seeds)} seeds ({listed}): one thin line per seed in the method's colour."
    unfinished = [
        f"{label} seed {seed}" for label, seed, run in every_run(runs) if not finished(run)
    ]
    return (
        f"{len(seeds)} seeds ({listed}): faint lines are the seeds; the thick line is their "
        "mean and the shaded band spans the lowest to the highest seed, both on the union of "
        "the seeds' logged x values (each seed linearly interpolated between its points) as "
        "far as every seed has logged."
    ) + (
        f" Unfinished (no exit record), drawn dashed and left out of the mean: "
        f"{', '.join(unfinished)}."
        if unfinished
        else ""
    )


def finished(run: Run) -> bool:
    """Whether the run wrote its exit record; one still running (or killed) has not, and its
    curve stops short of its horizon."""
    return run.exit_code is not None


def render(spec: FigureSpec, runs: Seeded, name: Namer) -> Figure:
    """The figure of `spec` over runs (label -> seed -> run); NotMeasurable when nothing to
    draw."""
    if spec.kind in ("points", "drops"):
        from repro.report import point_plots  # loads matplotlib only when a figure is drawn

        return point_plots.render(spec, runs, name)
    from repro.report import curve_plots

    return curve_plots.render(spec, runs, name)


def draw_figure(spec: FigureSpec, runs: Seeded, name: Namer, path: Path) -> Path:
    """Draw `spec` into `path` (.svg, or .png at twice the screen resolution); NotMeasurable
    when nothing to draw."""
    from repro.report.canvas import save

    return save(render(spec, runs, name), Path(path))
