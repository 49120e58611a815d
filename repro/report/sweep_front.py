"""A sweep's Pareto front drawn in a paper's report (the CR front beside the
compression ratios the Flexible Top-k paper's controller chose by its Eq. 6).

A claims file lists `sweep_fronts`: each names the full sweep spec, the two objectives to
plot, the searched parameter to read off each front point, and the paper's chosen band of
that parameter. `chosen_run` names a run of the set whose own choices of that parameter (its
logged `chosen_metric`, e.g. the ratio the MOO controller picked at each log point) are
marked beside the front, with their share of the run's log points over every seed, and whose
end (its two objectives, each seed) is a point beside the front. Which study is drawn, the
full sweep or the reproduction's own search, is `repro.report.sweep_source`'s choice; with
none the figure is listed as missing with the command that runs one. The front's points are
coloured by the collective (`repro.sweep.front`); the front is also written beside the page
as `<id>.csv` and an interactive `<id>.html` (hover shows a trial's settings).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from repro.claims.figure_specs import SweepFrontSpec
from repro.errors import UserError
from repro.pages.writer import FigureOut
from repro.report.canvas import save
from repro.report.colours import colour_for
from repro.report.plots import axis_label
from repro.report.sweep_source import find_source
from repro.sweep.front import Front, coordinates, write_csv
from repro.sweep.front_page import write_front_page
from repro.sweep.front_plot import FRONT_POINT, KNEE_RING, draw_front, legend_entries
from repro.sweep.spec import SweepSpec
from repro.track.series import Seeded, last_logged


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def chosen_shares(front: SweepFrontSpec, runs: Seeded) -> dict[float, float]:
    """Each value the `chosen_run` logged for `chosen_metric` (3 significant digits) and its
    share of that run's log points, pooled over its seeds; empty without such a run."""
    logged = [
        _finite(row.get(front.chosen_metric))
        for run in runs.get(front.chosen_run, {}).values()
        for row in run.history
    ]
    counts = Counter(float(f"{v:.3g}") for v in logged if v is not None)
    total = sum(counts.values())
    return {v: n / total for v, n in sorted(counts.items())}


def _check_names(front: SweepFrontSpec, spec: SweepSpec) -> None:
    """The claims file's axes and parameter must be the drawn search's own objectives and
    searched key: a misspelt one would otherwise end the report in a KeyError."""
    keys = [p.key for p in spec.space]
    for setting, known in (("x", spec.metric_names), ("y", spec.metric_names), ("param", keys)):
        name = getattr(front, setting)
        if name not in known:
            raise UserError(
                f"sweep_fronts {front.id}: {setting} '{name}' is not in the search "
                f"{spec.source}; use one of {', '.join(known)}"
            )


def _knee_words(front: SweepFrontSpec, data: Front) -> str:
    knee = data.knee_row
    params = ", ".join(
        f"{k.rsplit('.', 1)[-1]} {f'{v:.3g}' if isinstance(v, float) else v}"
        for k, v in knee["params"].items()
    )
    return (
        f"knee (ringed): trial {knee['trial']}, {params}: {axis_label(front.y)} "
        f"{knee['values'][front.y]:.4g} at {axis_label(front.x)} {knee['values'][front.x]:.4g}"
    )


def _page_note(front: SweepFrontSpec, where: str) -> str:
    """The interactive page's note. It draws the front alone, so where the title sets it
    beside the paper's values, the note says where those are drawn: a reader of the page
    found no paper's ratio on it."""
    beside = []
    if front.band:
        low, high = front.band
        beside.append(front.band_label or f"the band {low:g}-{high:g} of {front.param}")
    if front.chosen_run:
        beside.append(f"the values of {front.param} the {front.chosen_run} run chose")
    if not beside:
        return f"Study: {where}."
    return (
        f"Study: {where}. This page draws the front alone; the report's figure "
        f"({front.id}.svg) sets it beside {' and '.join(beside)}."
    )


def _chosen_ends(ax: Any, front: SweepFrontSpec, runs: Seeded) -> int:
    """The chosen run's end in objective space (its last logged values, as a trial's
    objectives), one cross per seed; how many were drawn."""
    ends = [
        (_finite(last_logged(run, front.x)), _finite(last_logged(run, front.y)))
        for run in runs.get(front.chosen_run, {}).values()
    ]
    ends = [(x, y) for x, y in ends if x is not None and y is not None]
    if ends:
        # a thin cross under the front's points: where it meets one, the point stays visible
        ax.scatter(
            *zip(*ends, strict=True),
            marker="x",
            s=70,
            color=colour_for(front.chosen_run),
            linewidths=1.8,
            label=f"{front.chosen_run} run's end (each seed)",
            zorder=2.5,
        )
    return len(ends)


def _against_param(ax: Any, front: SweepFrontSpec, data: Front, shares: dict) -> None:
    """The right panel: y against the searched parameter, the paper's band and the chosen
    run's own choices."""
    param = front.param
    if front.band:
        ax.axvspan(*front.band, color="#2ca02c", alpha=0.15, label=front.band_label or "paper")
    for i, (value, share) in enumerate(shares.items()):
        ax.axvline(
            value,
            ls="--",
            color=colour_for(front.chosen_run),
            alpha=0.3 + 0.7 * share,
            label=f"{front.chosen_run} run's choices of {param}" if i == 0 else None,
        )
    other = [r for r in data.dominated() if param in r["params"]]
    ax.scatter(
        *coordinates(other, param, front.y),
        s=22,
        facecolors="none",
        edgecolors=[data.colour(r) for r in other],
        linewidths=0.9,
        zorder=1,
    )
    for row in data.front:
        ax.scatter(*coordinates([row], param, front.y), color=data.colour(row), **FRONT_POINT)
    ax.scatter(*coordinates([data.knee_row], param, front.y), **KNEE_RING)
    ax.set_xscale("log")
    ax.set_xlabel(param)
    ax.set_ylabel(axis_label(front.y))
    ax.set_title(f"{axis_label(front.y)} against {param}", fontsize=10)


def draw_sweep_front(front: SweepFrontSpec, out_dir: Path, runs: Seeded) -> FigureOut:
    """Two panels: the front in objective space (coloured by collective, the knee ringed,
    the chosen run's ends beside it), and y against the searched parameter with the paper's
    band shaded and the chosen run's own choices marked. Writes `<id>.svg`, and the
    front as `<id>.csv` and `<id>.html`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    source = find_source(front.spec, runs)
    if isinstance(source, str):
        return FigureOut(front.id, front.title, front.caption, None, source)
    data = source.front
    _check_names(front, data.spec)
    shares = chosen_shares(front, runs)
    fig = Figure(figsize=(11, 5.2), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    draw_front(
        left, data, front.x, front.y, label=lambda r: f"{r['params'].get(front.param, 0):.2g}"
    )
    ends = _chosen_ends(left, front, runs)
    left.set_xlabel(axis_label(front.x))
    left.set_ylabel(axis_label(front.y))
    left.set_title(f"Pareto front (labels: {front.param})", fontsize=10)
    _against_param(right, front, data, shares)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    # one legend for both panels, under them: it covers no data
    entries = legend_entries([left, right], ("dominated",))
    fig.legend(*entries, loc="outside lower center", ncol=3, fontsize=8)
    fig.suptitle(front.title)
    path = save(fig, out_dir / f"{front.id}.svg")
    write_csv(data, out_dir / f"{front.id}.csv")
    write_front_page(
        data, out_dir / f"{front.id}.html", front.title, _page_note(front, source.where)
    )
    caption = (
        f"{front.caption} Points: the Pareto search {source.where}; filled: its front, "
        f"coloured by {data.colour_by}; open: dominated trials; {_knee_words(front, data)}."
    )
    if ends:
        caption += f" Crosses: where the {front.chosen_run} run ended, each seed."
    if shares:
        picks = ", ".join(f"{v:g} ({share:.0%})" for v, share in shares.items())
        caption += (
            f" Dashed lines: the values of {front.param} the {front.chosen_run} run chose "
            f"(share of its log points, all seeds): {picks}."
        )
    caption += (
        " Look at which collective holds the front and where the knee's ratio falls against "
        f"the shaded band and the dashed choices. The front as a table: {front.id}.csv; "
        f"interactive: {front.id}.html."
    )
    return FigureOut(front.id, front.title, caption, path.name)
