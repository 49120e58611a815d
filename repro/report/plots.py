"""Report figures (PNG, matplotlib's Agg canvas; no pyplot, so no global state or display).

A `FigureSpec` (from a claims file's `figures:`) says what to draw; `draw_figure` reads the
runs and writes the PNG. Kinds: `curves` (a metric against step or a clock, one line per
run), `steps` (a piecewise-constant metric such as tau, or a categorical one such as the
chosen collective, drawn as a step plot), `points` (one number per run, computed by a
calculator, against a config value such as the effective batch; one series per setting).
Colours are keyed by run label with a fixed palette, so a method looks the same in every
report.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from repro.errors import UserError
from repro.report.calculators import CALCULATORS, check_params
from repro.report.series import NotMeasurable, Run, cfg, points, trailing_mean, x_metric

KINDS = ("curves", "steps", "points")

AXIS_LABELS = {
    "step": "step (optimizer steps)",
    "time/modeled_s": "modeled time (s)",
    "time/wall_s": "wall-clock time (s)",
    "train/loss": "training loss (cross-entropy)",
    "test/loss": "test loss (cross-entropy)",
    "test/acc": "test accuracy (fraction)",
    "method/tau": "communication period tau (local steps)",
    "method/cr": "compression ratio c (fraction kept)",
    "method/collective": "collective",
    "method/gain": "compression gain",
    "comm/bytes": "payload bytes sent (cumulative, B)",
    "lr": "learning rate",
    "effective_batch": "effective batch (workers x batch per worker)",
}

CLOCK_SENTENCES = {
    "time/modeled_s": "x axis: modeled clock (sampled compute times plus the alpha-beta "
    "network model), seconds.",
    "time/wall_s": "x axis: measured wall clock on this machine, seconds.",
    "step": "x axis: optimizer steps (no clock).",
}

# Fixed colours for the methods of the three papers; families of parameterised runs
# (fixed tau, one Top-k variant at several ratios) share a colour map, shaded by parameter.
FIXED_COLOURS = {
    "sync": "#000000",
    "dense": "#000000",
    "adacomm": "#d62728",
    "adacomm_lrdecay": "#ff7f0e",
    "adasum": "#d62728",
    "sum": "#1f77b4",
    "mean": "#2ca02c",
    "moo": "#d62728",
}
FAMILY_MAPS = (
    (r"local_sgd.*", "Blues"),
    (r"ag_topk.*", "Oranges"),
    (r"star_topk.*", "Greens"),
    (r"var_topk.*", "Purples"),
)
FALLBACK = colormaps["tab10"]


def _family(label: str) -> str | None:
    return next((cmap for pattern, cmap in FAMILY_MAPS if re.fullmatch(pattern, label)), None)


def colour_for(label: str) -> str:
    """The colour of a run label in every report (fixed map, family shade, or stable hash).

    A family member is shaded by |log2| of the first number in its label (tau 4 lighter than
    tau 16, ratio 0.1 lighter than 0.001), saturating so that large values stay distinct.
    """
    if label in FIXED_COLOURS:
        return FIXED_COLOURS[label]
    cmap = _family(label)
    if cmap is not None:
        number = re.search(r"\d+(?:\.\d+)?", label)
        magnitude = abs(math.log2(float(number.group()))) if number and float(number.group()) else 3
        return to_hex(colormaps[cmap](0.3 + 0.7 * (1 - math.exp(-magnitude / 4))))
    return to_hex(FALLBACK(zlib.crc32(label.encode()) % FALLBACK.N))


def line_style(label: str) -> str:
    """Dashed for fixed-parameter baselines (a family), solid for every other method."""
    return "--" if _family(label) else "-"


def axis_label(name: str) -> str:
    return AXIS_LABELS.get(name, name)


@dataclass(frozen=True)
class FigureSpec:
    """One figure of a report: what to plot, over which runs, and how to scale the axes.

    `x` is "step", a clock ("modeled", "wall"), a metric, or for `points` a config path
    ("trainer.batch_size") or "effective_batch". `runs` is "all" or a list of labels.
    `reference` lines/markers: {y: v} horizontal, {x: v} vertical, {x, y} a marker; each
    with a `label` saying where the published value comes from.
    """

    id: str
    title: str
    y: str
    x: str = "step"
    kind: str = "curves"
    runs: Any = "all"
    logx: bool = False
    logy: bool = False
    smooth: int = 1
    caption: str = ""
    xlabel: str = ""
    ylabel: str = ""
    reference: list = field(default_factory=list)
    measure: dict = field(default_factory=dict)
    series: list = field(default_factory=list)

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
            if (
                not isinstance(ref, dict)
                or not ({"x", "y"} & set(ref))
                or set(ref) - {"x", "y", "label"}
            ):
                raise UserError(f"reference {ref!r} must be a mapping of x and/or y (+ label)")
        if self.kind == "points":
            params = {"run": "", "metric": self.y, **(self.measure.get("params") or {})}
            check_params(self.measure.get("calculator"), params)

    def clock_sentence(self) -> str:
        """Which clock the x axis uses, for the caption."""
        if self.kind == "points":
            return f"x axis: run setting '{self.x}'."
        return CLOCK_SENTENCES.get(x_metric(self.x), f"x axis: '{x_metric(self.x)}'.")

    def selected(self, labels: list[str]) -> list[str]:
        return labels if self.runs == "all" else [lab for lab in labels if lab in self.runs]


Namer = Callable[[str], str]


def _axes(spec: FigureSpec, xname: str):
    fig = Figure(figsize=(7.0, 4.2), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(spec.title)
    ax.set_xlabel(spec.xlabel or axis_label(xname))
    ax.set_ylabel(spec.ylabel or axis_label(spec.y))
    ax.grid(True, alpha=0.3)
    return fig, ax


def _finish(fig: Figure, ax, spec: FigureSpec, path: Path) -> Path:
    for ref in spec.reference:
        label = ref.get("label", "published")
        if "x" in ref and "y" in ref:
            ax.plot([ref["x"]], [ref["y"]], "k*", markersize=11, label=label)
        elif "y" in ref:
            ax.axhline(ref["y"], color="0.4", linestyle="--", linewidth=1, label=label)
        else:
            ax.axvline(ref["x"], color="0.4", linestyle="--", linewidth=1, label=label)
    if spec.logx:
        ax.set_xscale("log")
    if spec.logy:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _draw_lines(spec: FigureSpec, runs: Mapping[str, Run], name: Namer, path: Path) -> Path:
    fig, ax = _axes(spec, x_metric(spec.x))
    categories: list[str] = []
    drawn = 0
    for label in spec.selected(list(runs)):
        xs, ys = points(runs[label], spec.y, spec.x)
        if not ys:
            continue
        if any(isinstance(y, str) for y in ys):
            # Categorical values (the chosen collective) share one y axis across runs.
            categories += [str(y) for y in ys if str(y) not in categories]
            values = [float(categories.index(str(y))) for y in ys]
        else:
            values = trailing_mean([float(y) for y in ys], spec.smooth)
        style = {"drawstyle": "steps-post"} if spec.kind == "steps" else {}
        ax.plot(
            xs,
            values,
            color=colour_for(label),
            linestyle=line_style(label),
            label=name(label),
            linewidth=1.5,
            **style,
        )
        drawn += 1
    if not drawn:
        raise NotMeasurable(f"no selected run logged '{spec.y}' against '{x_metric(spec.x)}'")
    if categories:
        ax.set_yticks(range(len(categories)), categories)
    return _finish(fig, ax, spec, path)


def _setting(run: Run, x: str) -> float | None:
    if x == "effective_batch":
        world, batch = cfg(run, "trainer.world_size"), cfg(run, "trainer.batch_size")
        return None if world is None or batch is None else float(world) * float(batch)
    value = cfg(run, x)
    return None if value is None else float(value)


def _draw_points(spec: FigureSpec, runs: Mapping[str, Run], path: Path) -> Path:
    fig, ax = _axes(spec, spec.x)
    calc = CALCULATORS[spec.measure["calculator"]]
    params = {"metric": spec.y, **(spec.measure.get("params") or {})}
    groups: dict[str, list[tuple[float, float]]] = {}
    for label in spec.selected(list(runs)):
        x = _setting(runs[label], spec.x)
        try:
            y = float(calc({label: runs[label]}, run=label, **params).value)
        except NotMeasurable:
            continue
        if x is None or math.isinf(y):
            continue
        key = " / ".join(str(cfg(runs[label], s)) for s in spec.series) or spec.y
        groups.setdefault(key, []).append((x, y))
    if not groups:
        raise NotMeasurable(f"no selected run gave a finite '{spec.measure['calculator']}'")
    for key, pts in sorted(groups.items()):
        pts.sort()
        ax.plot(*zip(*pts, strict=True), "o-", color=colour_for(key), label=key)
    return _finish(fig, ax, spec, path)


def draw_figure(spec: FigureSpec, runs: Mapping[str, Run], name: Namer, path: Path) -> Path:
    """Draw `spec` over runs keyed by label into `path`; NotMeasurable when nothing to draw."""
    if spec.kind == "points":
        return _draw_points(spec, runs, path)
    return _draw_lines(spec, runs, name, path)
