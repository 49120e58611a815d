"""Report figures of one number per run and seed (`kind: points` and `kind: drops`).

`points`: a calculator's value per run against a config value such as the effective batch,
one series per setting (Adasum's steps to the target against the batch, Adasum beside
Horovod Average). `drops`: each run's accuracy drop below the reference run of the same seed
against c x steps (how often each parameter reaches the other workers: about 9.8 in Flexible
Top-k's 9,766 steps at c = 0.001, the horizon its accuracy claims rest on) or against a
config value such as the ratio c. The drop is read as the claims read it: percentage points
of `y`, the mean of the last `smooth` evaluations. Spec fields of `drops`: `series` lists the
families as run-label prefixes ("star_topk_c"), `measure.reference` names the reference run
("dense_ring"), `published` the paper's drops per family, drawn beside ours (Tables III-IV).

Both draw every seed as a dot, the mean over the seeds of a series as a joined line and the
band from the lowest to the highest seed; `panels` puts series in panels of their own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from repro.claims.calculators.registry import registered
from repro.claims.figure_specs import FigureSpec
from repro.report.canvas import (
    REFERENCE_STYLES,
    draw_reference,
    finish,
    mark_off_scale,
    open_canvas,
)
from repro.report.colours import colour_for
from repro.report.plots import Namer, drop_labels, panel_groups, resolve_reference
from repro.track.series import NotMeasurable, Run, Seeded, cfg, final

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# series -> x -> each seed's value (inf: that seed never got there)
Values = dict[str, dict[float, list[float]]]


def render(spec: FigureSpec, runs: Seeded, name: Namer) -> Figure:
    """The figure of `spec` (kind `points` or `drops`); NotMeasurable when nothing to draw."""
    if spec.kind == "drops":
        drops = drops_by_family(spec, runs)
        if not drops:
            raise NotMeasurable(f"no run of {list(spec.series)} has a drop to draw")
        panels = [
            (title, {family: drops[family] for family in families})
            for title, families in panel_groups(spec, list(drops))
        ]
    else:
        panels = [
            (title, _points_by_series(spec, runs, labels))
            for title, labels in panel_groups(spec, spec.selected(list(runs)))
        ]
        panels = [(title, values) for title, values in panels if values]
        at_each_x = [v for _, values in panels for by_x in values.values() for v in by_x.values()]
        if all(math.isinf(v) for v in sum(at_each_x, [])):
            raise NotMeasurable(f"no selected run gave a finite '{spec.measure['calculator']}'")
    fig = open_canvas(spec, [title for title, _ in panels], spec.x)
    refs = [r for r in (resolve_reference(g, spec, runs) for g in spec.reference) if r]
    for ax, (_, values) in zip(fig.axes, panels, strict=True):
        for key, by_x in values.items():
            _draw_series(ax, spec, by_x, colour_for(key), spec.series_labels.get(key, key))
            for entry in spec.published:
                if entry["series"] == key:
                    _draw_published(ax, entry)
        if spec.kind == "drops":
            ax.axhline(0.0, color="0.7", linewidth=0.8)
        for ref in refs:
            draw_reference(ax, ref)
    settings = sorted({x for _, values in panels for by_x in values.values() for x in by_x})
    return finish(fig, spec, settings)


def _draw_series(
    ax: Axes, spec: FigureSpec, by_x: dict[float, list[float]], colour: str, label: str
) -> None:
    """A dot per seed, the means joined, the seeds' range shaded; values beyond `ylim` are
    marked at the edge."""
    dots = [(x, y) for x, ys in by_x.items() for y in ys if not math.isinf(y)]
    if dots:
        dot_x, dot_y = zip(*dots, strict=True)
        ax.plot(dot_x, dot_y, ".", color=colour, alpha=0.5, markersize=6, label="_nolegend_")
    # no mean where a seed never got there (its value is inf)
    xs = sorted(x for x, ys in by_x.items() if not any(math.isinf(y) for y in ys))
    if not xs:
        return
    means = [math.fsum(by_x[x]) / len(by_x[x]) for x in xs]
    if any(len(by_x[x]) > 1 for x in xs):
        low, high = [min(by_x[x]) for x in xs], [max(by_x[x]) for x in xs]
        ax.fill_between(xs, low, high, color=colour, alpha=0.16, linewidth=0, gid=f"band-{label}")
    ax.plot(xs, means, "o-", color=colour, label=label, zorder=3, gid=f"mean-{label}")
    if spec.ylim is not None:
        for x, y in zip(xs, means, strict=True):
            mark_off_scale(ax, x, y, spec.ylim, colour)


def _draw_published(ax: Axes, entry: dict) -> None:
    """The paper's values of one series: hollow diamonds on a dotted black line."""
    style = REFERENCE_STYLES["published"]  # color, linestyle and linewidth
    ax.plot(
        entry["x"],
        entry["y"],
        marker="D",
        markersize=6,
        markerfacecolor="white",
        markeredgecolor=style["color"],
        **style,
        zorder=4,
        label=entry["label"],
        gid=f"published-{entry['series']}",
    )


def _setting(run: Run, x: str) -> float | None:
    if x == "effective_batch":
        world, batch = cfg(run, "trainer.world_size"), cfg(run, "trainer.batch_size")
        return None if world is None or batch is None else float(world) * float(batch)
    if x == "sends_per_parameter":
        return sends_per_parameter(run)
    value = cfg(run, x)
    return None if value is None else float(value)


def _points_by_series(spec: FigureSpec, runs: Seeded, labels: list[str]) -> Values:
    """series -> x -> each seed's calculator value, over the runs of `labels`."""
    calc = registered()[spec.measure["calculator"]]
    params = {"metric": spec.y, **(spec.measure.get("params") or {})}
    values: Values = {}
    for label in labels:
        for run in runs[label].values():
            x = _setting(run, spec.x)
            try:
                y = float(calc({label: run}, run=label, **params).value)
            except NotMeasurable:
                continue
            if x is None:
                continue
            key = " / ".join(str(cfg(run, s)) for s in spec.series) or spec.y
            values.setdefault(key, {}).setdefault(x, []).append(y)
    return dict(sorted(values.items()))


def sends_per_parameter(run: Run) -> float | None:
    """c x steps of a fixed-ratio run: how many times each parameter is sent on average."""
    cr, steps = cfg(run, "method.cr"), cfg(run, "trainer.steps")
    if cr is None or steps is None or cfg(run, "method.cr_controller") != "fixed":
        return None
    return float(cr) * float(steps)


def drops_by_family(spec: FigureSpec, runs: Seeded) -> Values:
    """family -> x -> each seed's drop in points below the reference run of its seed, for
    every selected fixed-ratio run that has one (x: `spec.x`, c x steps or a config value)."""
    reference = spec.measure["reference"]
    if reference not in runs:
        raise NotMeasurable(f"no reference run '{reference}' to measure drops against")
    out: Values = {}
    for family in spec.series:
        for label in drop_labels(spec, spec.selected(list(runs)), family):
            for seed, run in runs[label].items():
                ref = runs[reference].get(seed)
                if ref is None or sends_per_parameter(run) is None:
                    continue  # a ratio that moves has no single c x steps or c
                x = _setting(run, spec.x)
                try:
                    ends = final(ref, spec.y, spec.smooth) - final(run, spec.y, spec.smooth)
                except NotMeasurable:
                    continue
                if x is not None:
                    out.setdefault(family, {}).setdefault(x, []).append(100 * ends)
    return out
