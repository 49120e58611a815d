"""Report figures of one number per run and seed (`kind: points` and `kind: drops`).

`points`: a calculator's value per run against a config value such as the effective batch,
one series per setting. `drops`: each run's accuracy drop below the reference run of the
same seed against c x steps, the fraction kept times the optimizer steps, i.e. how often
each parameter reaches the other workers (about 9.8 in Flexible Top-k's 9,766 steps at
c = 0.001, the horizon its accuracy claims rest on). The drop is read as the claims read it:
percentage points of `y`, the mean of the last `smooth` evaluations. Spec fields of `drops`:
`series` lists the families as run-label prefixes ("star_topk_c"), `measure.reference`
names the reference run ("dense_ring"); `reference` marks a published value as on any
figure (a vertical line at the paper's c x steps).

Both draw every seed as a dot and the mean over seeds of a series as a joined line.
"""

from __future__ import annotations

import math
from pathlib import Path

from repro.report.calculators import CALCULATORS
from repro.report.colours import colour_for
from repro.report.plots import FigureSpec, Namer, _axes, _finish
from repro.report.series import NotMeasurable, Run, Seeded, cfg, final


def draw(spec: FigureSpec, runs: Seeded, name: Namer, path: Path) -> Path:
    """Draw `spec` (kind `points` or `drops`) into `path`; NotMeasurable when nothing to draw."""
    if spec.kind == "drops":
        return _draw_drops(spec, runs, name, path)
    return _draw_points(spec, runs, path)


def _setting(run: Run, x: str) -> float | None:
    if x == "effective_batch":
        world, batch = cfg(run, "trainer.world_size"), cfg(run, "trainer.batch_size")
        return None if world is None or batch is None else float(world) * float(batch)
    value = cfg(run, x)
    return None if value is None else float(value)


def _draw_points(spec: FigureSpec, runs: Seeded, path: Path) -> Path:
    fig, ax = _axes(spec, spec.x)
    calc = CALCULATORS[spec.measure["calculator"]]
    params = {"metric": spec.y, **(spec.measure.get("params") or {})}
    # series -> x -> each seed's value (inf: that seed never got there)
    groups: dict[str, dict[float, list[float]]] = {}
    for label in spec.selected(list(runs)):
        for run in runs[label].values():
            x = _setting(run, spec.x)
            try:
                y = float(calc({label: run}, run=label, **params).value)
            except NotMeasurable:
                continue
            if x is None:
                continue
            key = " / ".join(str(cfg(run, s)) for s in spec.series) or spec.y
            groups.setdefault(key, {}).setdefault(x, []).append(y)
    finite = {
        key: [(x, y) for x, ys in by_x.items() for y in ys if not math.isinf(y)]
        for key, by_x in groups.items()
    }
    if not any(finite.values()):
        raise NotMeasurable(f"no selected run gave a finite '{spec.measure['calculator']}'")
    for key, by_x in sorted(groups.items()):
        colour = colour_for(key)
        if finite[key]:
            ax.plot(*zip(*finite[key], strict=True), ".", color=colour, alpha=0.5, markersize=5)
        means = sorted((x, sum(ys) / len(ys)) for x, ys in by_x.items())
        means = [(x, y) for x, y in means if not math.isinf(y)]
        if means:
            ax.plot(*zip(*means, strict=True), "o-", color=colour, label=key)
    return _finish(fig, ax, spec, runs, path)


def sends_per_parameter(run: Run) -> float | None:
    """c x steps of a fixed-ratio run: how many times each parameter is sent on average."""
    cr, steps = cfg(run, "method.cr"), cfg(run, "trainer.steps")
    if cr is None or steps is None or cfg(run, "method.cr_controller") != "fixed":
        return None
    return float(cr) * float(steps)


def drops_by_family(spec: FigureSpec, runs: Seeded) -> dict[str, list[tuple[float, float]]]:
    """family -> (c x steps, drop in points) for every selected run and seed that has a
    reference run of the same seed."""
    reference = (spec.measure or {}).get("reference")
    if reference not in runs:
        raise NotMeasurable(f"no reference run '{reference}' to measure drops against")
    out: dict[str, list[tuple[float, float]]] = {}
    for family in spec.series:
        for label in spec.selected(list(runs)):
            if not label.startswith(family) or label == reference:
                continue
            for seed, run in runs[label].items():
                ref, x = runs[reference].get(seed), sends_per_parameter(run)
                if ref is None or x is None:
                    continue
                try:
                    ends = final(ref, spec.y, spec.smooth) - final(run, spec.y, spec.smooth)
                except NotMeasurable:
                    continue
                out.setdefault(family, []).append((x, 100 * ends))
    return out


def _draw_drops(spec: FigureSpec, runs: Seeded, name: Namer, path: Path) -> Path:
    families = drops_by_family(spec, runs)
    if not families:
        raise NotMeasurable(f"no run of {list(spec.series)} has a drop to draw")
    fig, ax = _axes(spec, spec.x)
    for family, dots in families.items():
        colour = colour_for(family)
        first = next(label for label in runs if label.startswith(family))
        ax.plot(*zip(*dots, strict=True), ".", color=colour, alpha=0.5, markersize=6)
        by_x: dict[float, list[float]] = {}
        for x, drop in dots:
            by_x.setdefault(x, []).append(drop)
        means = sorted((x, math.fsum(ds) / len(ds)) for x, ds in by_x.items())
        legend = name(first).split(" (c = ")[0]  # the family's name without its ratio
        ax.plot(*zip(*means, strict=True), "o-", color=colour, label=legend)
    ax.axhline(0.0, color="0.7", linewidth=0.8)
    return _finish(fig, ax, spec, runs, path)
