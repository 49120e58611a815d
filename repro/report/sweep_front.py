"""A sweep's Pareto front drawn in a paper's report (the CR front beside the
compression ratios the Flexible Top-k paper's controller chose).

A claims file lists `sweep_fronts`: each names a sweep spec, the two objectives to plot, the
searched parameter to read off each front point, and the paper's chosen band of that
parameter. `chosen_run` names a run of the set whose own choices of that parameter (its
logged `chosen_metric`, e.g. the ratio the MOO controller picked at each log point) are
marked beside the front, with their share of the run's log points over every seed. The
study is read from the spec's own storage; when the sweep has not been run the figure is
listed as missing with the command that produces it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from repro.errors import UserError
from repro.report.plots import axis_label
from repro.report.render import FigureOut
from repro.report.series import Seeded

SOURCE_TREE = Path(__file__).resolve().parents[2]


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


def chosen_shares(front: SweepFrontSpec, runs: Seeded) -> dict[float, float]:
    """Each value the `chosen_run` logged for `chosen_metric` (3 significant digits) and its
    share of that run's log points, pooled over its seeds; empty without such a run."""
    counts: dict[float, int] = {}
    for run in runs.get(front.chosen_run, {}).values():
        for row in run.history:
            value = row.get(front.chosen_metric)
            if isinstance(value, int | float) and math.isfinite(value):
                key = float(f"{value:.3g}")
                counts[key] = counts.get(key, 0) + 1
    total = sum(counts.values())
    return {v: n / total for v, n in sorted(counts.items())}


def draw_sweep_front(front: SweepFrontSpec, out_dir: Path, runs: Seeded) -> FigureOut:
    """Two panels: the front in objective space, and accuracy against the searched parameter
    with the paper's chosen band shaded and the `chosen_run`'s own choices marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from repro.sweep.results import pareto_front
    from repro.sweep.spec import load_spec

    caption = f"{front.caption} Points: the sweep's Pareto-optimal trials ({front.spec})."
    shares = chosen_shares(front, runs)
    if shares:
        picks = ", ".join(f"{v:g} ({share:.0%})" for v, share in shares.items())
        caption += (
            f" Dashed lines: the values of {front.param} the {front.chosen_run} run chose "
            f"(share of its log points, all seeds): {picks}."
        )
    spec_path = Path(front.spec)
    if not spec_path.is_absolute() and not spec_path.exists():
        spec_path = SOURCE_TREE / spec_path  # the shipped sweeps/ beside reports/claims/
    try:
        rows, knee = pareto_front(load_spec(spec_path))
    except UserError as err:
        return FigureOut(
            front.id,
            front.title,
            caption,
            None,
            f"{err}; run `repro sweep {front.spec}` to draw it",
        )
    xs = [float(r["values"][front.x]) for r in rows]
    ys = [float(r["values"][front.y]) for r in rows]
    ps = [float(r["params"].get(front.param, math.nan)) for r in rows]
    fig = Figure(figsize=(10, 4.2))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    left.plot(xs, ys, "o-", color="#1f77b4")
    left.plot(
        [float(knee["values"][front.x])],
        [float(knee["values"][front.y])],
        "*",
        ms=14,
        color="#d62728",
        label="knee point",
    )
    for x, y, p in zip(xs, ys, ps, strict=True):
        left.annotate(f"{p:.3g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    left.set_xlabel(axis_label(front.x))
    left.set_ylabel(axis_label(front.y))
    left.set_title("Pareto front (labels: " + front.param.rsplit(".", 1)[-1] + ")", fontsize=10)
    left.legend(fontsize=8)
    if front.band:
        right.axvspan(*front.band, color="#2ca02c", alpha=0.15, label=front.band_label or "paper")
    right.plot(ps, ys, "o", color="#1f77b4", label="front points")
    for i, (value, share) in enumerate(shares.items()):
        right.axvline(
            value,
            ls="--",
            color="#d62728",
            alpha=0.3 + 0.7 * share,
            label=f"{front.chosen_run}'s choices" if i == 0 else None,
        )
    right.set_xscale("log")
    right.set_xlabel(front.param)
    right.set_ylabel(axis_label(front.y))
    right.set_title(f"{axis_label(front.y)} against {front.param}", fontsize=10)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(front.title)
    fig.tight_layout()
    path = out_dir / f"{front.id}.png"
    fig.savefig(path, dpi=110)
    return FigureOut(front.id, front.title, caption, path.name)
