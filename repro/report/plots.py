"""Report figures (PNG, matplotlib's Agg canvas; no pyplot, so no global state or display).

A `FigureSpec` (from a claims file's `figures:`) says what to draw; `draw_figure` reads the
runs (label -> seed -> run) and writes the PNG. Kinds: `curves` (a metric against step or a
clock), `steps` (a piecewise-constant metric such as tau, or a categorical one such as the
chosen collective, drawn as a step plot), `points` (one number per run, computed by a
calculator, against a config value such as the effective batch; one series per setting),
`drops` (accuracy drop below a reference run against c x steps; both `point_plots`).
Every seed is drawn: curves as one thin line per seed in the method's colour, points and
drops as a small dot per seed with the mean over seeds joined by a line (`seeds_sentence`
says so). Colours and line styles come from `colours` (keyed by run label), so a method
looks the same in every report.
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
from repro.report.colours import colour_for, line_style
from repro.report.series import (
    NotMeasurable,
    Seeded,
    points,
    seeds_of,
    trailing_mean,
    x_metric,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KINDS = ("curves", "steps", "points", "drops")

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


@dataclass(frozen=True)
class FigureSpec:
    """One figure of a report: what to plot, over which runs, and how to scale the axes.

    `x` is "step", a clock ("modeled", "wall"), a metric, for `points` a config path
    ("trainer.batch_size") or "effective_batch", for `drops` "sends_per_parameter". `runs`
    is "all" or a list of labels. `reference` lines/markers: {y: v} horizontal, {x: v}
    vertical, {x, y} a marker; each with a `label` saying where the published value comes
    from. A published value stated relative to a run ("a third of sync's time") is
    {run: sync, x_times: 0.333}: a vertical line at that multiple of the run's last logged x
    (y_times: of its last logged y).
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
            if (
                not isinstance(ref, dict)
                or not ({"x", "y", "x_times", "y_times"} & set(ref))
                or set(ref) - {"x", "y", "label", "run", "x_times", "y_times"}
                or (({"x_times", "y_times"} & set(ref)) and "run" not in ref)
            ):
                raise UserError(
                    f"reference {ref!r} must be a mapping of x and/or y, or of run and "
                    "x_times and/or y_times (+ label)"
                )
        if self.kind == "drops" and not (self.series and self.measure.get("reference")):
            raise UserError("kind 'drops' needs series (run-label prefixes) and measure.reference")
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
    from matplotlib.figure import Figure  # loads only when a figure is drawn

    fig = Figure(figsize=(7.0, 4.2), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(spec.title)
    ax.set_xlabel(spec.xlabel or axis_label(xname))
    ax.set_ylabel(spec.ylabel or axis_label(spec.y))
    ax.grid(True, alpha=0.3)
    return fig, ax


def resolve_reference(ref: dict, spec: FigureSpec, runs: Seeded) -> dict | None:
    """`ref` with x_times / y_times turned into numbers from its run's last logged point (the
    mean over its seeds); None when that run is absent or logged nothing on this figure's
    axes."""
    if "run" not in ref:
        return ref
    lasts = []
    for run in runs.get(ref["run"], {}).values():
        xs, ys = points(run, spec.y, spec.x)
        if ys and not isinstance(ys[-1], str):
            lasts.append((xs[-1], float(ys[-1])))
    if not lasts:
        return None
    out = {k: v for k, v in ref.items() if k in ("x", "y", "label")}
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
            f"{len(seeds)} seeds ({listed}): a small dot per seed, the mean over the seeds "
            "joined by a line (no mean where a seed never got there)."
        )
    return f"{len(seeds)} seeds ({listed}): one thin line per seed in the method's colour."


def _finish(fig: Figure, ax, spec: FigureSpec, runs: Seeded, path: Path) -> Path:
    for given in spec.reference:
        ref = resolve_reference(given, spec, runs)
        if ref is None:
            continue
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


def _draw_lines(spec: FigureSpec, runs: Seeded, name: Namer, path: Path) -> Path:
    fig, ax = _axes(spec, x_metric(spec.x))
    several = len(seeds_of(runs)) > 1
    categories: list[str] = []
    drawn = 0
    for label in spec.selected(list(runs)):
        named = False
        for run in runs[label].values():
            xs, ys = points(run, spec.y, spec.x)
            if not ys:
                continue
            if any(isinstance(y, str) for y in ys):
                # Categorical values (the chosen collective) share one y axis across runs.
                # dict.fromkeys: each new value once (a comprehension tests against the old list)
                categories += [y for y in dict.fromkeys(map(str, ys)) if y not in categories]
                values = [float(categories.index(str(y))) for y in ys]
            else:
                values = trailing_mean([float(y) for y in ys], spec.smooth)
            style = {"drawstyle": "steps-post"} if spec.kind == "steps" else {}
            ax.plot(
                xs,
                values,
                color=colour_for(label),
                linestyle=line_style(label),
                label="_nolegend_" if named else name(label),
                linewidth=0.9 if several else 1.5,
                alpha=0.8 if several else 1.0,
                **style,
            )
            named = True
            drawn += 1
    if not drawn:
        raise NotMeasurable(f"no selected run logged '{spec.y}' against '{x_metric(spec.x)}'")
    if categories:
        ax.set_yticks(range(len(categories)), categories)
    return _finish(fig, ax, spec, runs, path)


def draw_figure(spec: FigureSpec, runs: Seeded, name: Namer, path: Path) -> Path:
    """Draw `spec` over runs (label -> seed -> run) into `path`; NotMeasurable when nothing
    to draw."""
    if spec.kind in ("points", "drops"):
        from repro.report import point_plots  # imported here: it draws on this module's axes

        return point_plots.draw(spec, runs, name, path)
    return _draw_lines(spec, runs, name, path)
