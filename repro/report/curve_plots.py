"""Figures of a metric along training (`kind: curves` and `kind: steps`).

`curves`: each seed a faint line, the method's mean over seeds a thick line in its colour and
style, the band from the lowest to the highest seed shaded (`seed_bands` says how seeds that
log at different x are put on one grid). A run that has not run to its end (still running,
killed or stopped) is drawn dashed and kept out of the mean, so a seed that stopped short
does not cut the mean off at its last point. A horizontal reference with `cross` gets a marker where
each mean first reaches it, the reading AdaComm's headline takes from the loss curves.
`steps`: a piecewise-constant metric (tau, the compression ratio) or a categorical one (the
chosen collective) as one step line per seed, since a mean of a choice means nothing.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from repro.claims.figure_specs import FigureSpec
from repro.report.canvas import RASTER_POINTS, draw_reference, finish, mark_crossing, open_canvas
from repro.report.colours import colour_for, line_style
from repro.report.plots import (
    Namer,
    finished,
    panel_groups,
    resolve_reference,
    shown_everywhere,
    tasks_of,
)
from repro.report.seed_bands import SeedBand, seed_band
from repro.track.series import NotMeasurable, Run, Seeded, points, trailing_mean, x_metric

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D


def render(spec: FigureSpec, runs: Seeded, name: Namer) -> Figure:
    """The curves or step figure of `spec`; NotMeasurable when no selected run logged it."""
    labels = spec.selected(list(runs))
    groups = panel_groups(spec, labels)
    tasks = tasks_of(run for label in labels for run in runs[label].values())
    fig = open_canvas(spec, [title for title, _ in groups], x_metric(spec.x), tasks)
    refs = [r for r in (resolve_reference(g, spec, runs) for g in spec.reference) if r]
    everywhere = shown_everywhere(spec, runs)
    raster = sum(len(run.history) for lab in labels for run in runs[lab].values()) > RASTER_POINTS
    categories: list[str] = []
    drawn = 0
    for ax, (_, members) in zip(fig.axes, groups, strict=True):
        means: dict[str, tuple[SeedBand, Line2D]] = {}
        for label in everywhere + members:
            if spec.kind == "steps":
                drawn += _draw_steps(ax, spec, label, runs[label], name, categories)
                continue
            faint = label in everywhere
            mean, count = _draw_curves(ax, spec, label, runs[label], name, faint, raster)
            drawn += count
            if mean is not None and not faint:  # a baseline's own end is no crossing
                means[label] = mean
        for ref in refs:
            draw_reference(ax, ref)
            if "cross" in ref:  # FigureSpec allows it on a horizontal line only
                _mark_crossings(ax, ref, means)
    if not drawn:
        raise NotMeasurable(f"no selected run logged '{spec.y}' against '{x_metric(spec.x)}'")
    if categories:
        fig.axes[0].set_yticks(range(len(categories)), categories)
    return finish(fig, spec)


def _mark_crossings(ax: Axes, ref: dict, means: dict[str, tuple[SeedBand, Line2D]]) -> None:
    """A marker where each mean first reaches the target line; the legend names the x."""
    for label, (band, line) in means.items():
        x = band.crossing(ref["y"], ref["cross"], ref.get("interpolate", False))
        if math.isinf(x):
            line.set_label(f"{line.get_label()} (never reaches the target)")
            continue
        mark_crossing(ax, x, ref["y"], colour_for(label), label)
        line.set_label(f"{line.get_label()} (target at {x:.3g})")


def _seed_curves(spec: FigureSpec, label: str, by_seed: dict[int, Run]) -> list[tuple]:
    """(seed, xs, smoothed ys, finished) of every seed that logged the figure's metric."""
    logged = [(seed, run, *points(run, spec.y, spec.x)) for seed, run in by_seed.items()]
    if any(isinstance(y, str) for *_, ys in logged for y in ys):
        raise NotMeasurable(f"'{spec.y}' of '{label}' is categorical: draw it as kind steps")
    return [
        (seed, xs, trailing_mean([float(y) for y in ys], spec.smooth), finished(run))
        for seed, run, xs, ys in logged
        if ys
    ]


def _draw_curves(
    ax: Axes,
    spec: FigureSpec,
    label: str,
    by_seed: dict[int, Run],
    name: Namer,
    faint: bool,
    raster: bool,
) -> tuple[tuple[SeedBand, Line2D] | None, int]:
    """One method: its seeds, mean and band (a baseline repeated in every panel: mean and
    band only, thinner). Returns the band and the mean's line (None when the finished seeds
    share no x range) and how many seeds were drawn."""
    colour, style = colour_for(label), line_style(label)
    seeds = _seed_curves(spec, label, by_seed)
    band = seed_band([(xs, ys) for _, xs, ys, done in seeds if done])
    alone = band is not None and band.seeds == 1 and len(seeds) == 1
    if not faint and not alone:
        for seed, xs, ys, done in seeds:
            ax.plot(
                xs,
                ys,
                color=colour,
                linestyle="-" if done else (0, (3, 2)),
                linewidth=0.7,
                alpha=0.35,
                rasterized=raster,
                label="_nolegend_",
                gid=f"seed-{label}-s{seed}",
            )
    if band is None:
        if seeds:  # a legend entry still names the method whose seeds are drawn
            ax.plot([], [], color=colour, linestyle=style, label=name(label))
        return None, len(seeds)
    if band.seeds > 1:
        ax.fill_between(
            band.grid,
            band.low,
            band.high,
            color=colour,
            alpha=0.07 if faint else 0.16,
            linewidth=0,
            rasterized=raster,
            gid=f"band-{label}",
        )
    (line,) = ax.plot(
        band.grid,
        band.mean,
        color=colour,
        linestyle=style,
        linewidth=1.2 if faint else 2.0,
        zorder=3,
        label=name(label),
        gid=f"mean-{label}",
    )
    return (band, line), len(seeds)


def _draw_steps(
    ax: Axes,
    spec: FigureSpec,
    label: str,
    by_seed: dict[int, Run],
    name: Namer,
    categories: list[str],
) -> int:
    """One step line per seed; categorical values share one y axis across runs (in order of
    first appearance). Returns how many seeds were drawn."""
    several = len(by_seed) > 1
    drawn = 0
    for seed, run in by_seed.items():
        xs, ys = points(run, spec.y, spec.x)
        if not ys:
            continue
        if any(isinstance(y, str) for y in ys):
            # dict.fromkeys: each new value once (a comprehension tests against the old list)
            categories += [y for y in dict.fromkeys(map(str, ys)) if y not in categories]
            values = [float(categories.index(str(y))) for y in ys]
        else:
            values = trailing_mean([float(y) for y in ys], spec.smooth)
        ax.plot(
            xs,
            values,
            color=colour_for(label),
            linestyle=line_style(label),
            label="_nolegend_" if drawn else name(label),
            linewidth=1.0 if several else 1.6,
            alpha=0.8 if several else 1.0,
            drawstyle="steps-post",
            gid=f"seed-{label}-s{seed}",
        )
        drawn += 1
    return drawn
