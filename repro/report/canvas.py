"""The frame of a report figure: panels on one y axis, one legend outside the data, reference
lines in styles that tell a paper's number from a target, crossing marks, and the file.

A figure with `panels` gets one axes per panel that holds runs (small multiples sharing both
axes, so a level reads the same in every panel); otherwise one axes. The legend sits outside
every axes, below them, so it never covers a curve and the data keeps the figure's width.
Reference roles differ in colour and dash: a paper's value ("published") is dotted black,
the value a claim measures against ("target") solid grey; a marker reference is a star
(published) or a circle (target). SVG is written without a date and with fixed element ids,
so redrawing the same runs gives the same file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from repro.claims.figure_specs import FigureSpec
from repro.errors import UserError
from repro.report.plots import axis_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BASE_DPI = 100  # the figure's size in inches times this is its size on screen, in pixels
PNG_SCALE = 2  # a PNG is written at twice that, so it stays sharp when zoomed or on HiDPI
# Above this many logged points the seed lines are rasterized inside the SVG (at the PNG
# resolution); the means, bands' edges, text and axes stay vector and the file small.
RASTER_POINTS = 20_000
REFERENCE_STYLES = {
    "published": {"color": "black", "linestyle": (0, (1.2, 1.8)), "linewidth": 1.8},
    "target": {"color": "0.55", "linestyle": "-", "linewidth": 1.5},
}
REFERENCE_MARKERS = {"published": ("*", 11), "target": ("o", 8)}  # marker, size
CROSSING_LABEL = "where the mean first reaches the target line"
LEGEND_FONT = 8
SHORT_ENTRY_CHARS = 32  # legend entries this short fit three columns under one axes


def open_canvas(
    spec: FigureSpec, titles: Sequence[str], xname: str, tasks: Iterable[str] = ()
) -> Figure:
    """A figure with one axes per title (shared x and y; `fig.axes` in panel order), labelled
    for `spec` (a loss for the `workload.task`s of the runs drawn)."""
    from matplotlib.figure import Figure  # loads only when a figure is drawn

    n = max(1, len(titles))
    ncols = n if n <= 3 else 2 if n == 4 else 3
    nrows = math.ceil(n / ncols)
    # inches; at BASE_DPI a single axes is 800 px wide, panels 450 px each (370 in three
    # columns, which stay under 1,110 px)
    width = 4.5 if ncols <= 2 else 3.7
    size = (8.0, 4.2) if n == 1 else (width * ncols, 3.0 * nrows + 1.0)
    fig = Figure(figsize=size, dpi=BASE_DPI, layout="constrained")
    grid = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    cells = list(grid.flat)
    axes = cells[:n]
    for ax in cells[n:]:
        fig.delaxes(ax)
    for i, ax in enumerate(axes):
        if i + ncols >= n:  # no panel below it (the spare cells end the last row)
            ax.xaxis.set_tick_params(labelbottom=True)
        ax.grid(True, alpha=0.3)
    xlabel, ylabel = spec.xlabel or axis_label(xname), spec.ylabel or axis_label(spec.y, tasks)
    if n == 1:
        axes[0].set_title(spec.title)
        axes[0].set_xlabel(xlabel)
        axes[0].set_ylabel(ylabel)
        return fig
    fig.suptitle(spec.title)
    fig.supylabel(ylabel, fontsize=10)
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=10)
        if ax.xaxis.get_tick_params()["labelbottom"]:  # the lowest panel of its column
            ax.set_xlabel(xlabel, fontsize=9)
    return fig


def draw_reference(ax: Axes, ref: dict) -> None:
    """One resolved reference: a horizontal or vertical line, or a marker."""
    role = ref.get("role", "published")
    style = REFERENCE_STYLES[role]
    named = {"label": ref.get("label", role), "gid": f"ref-{role}"}
    if "x" in ref and "y" in ref:
        marker, size = REFERENCE_MARKERS[role]
        ax.plot([ref["x"]], [ref["y"]], marker, markersize=size, color=style["color"], **named)
    elif "y" in ref:
        ax.axhline(ref["y"], **style, **named, zorder=1.5)
    else:
        ax.axvline(ref["x"], **style, **named, zorder=1.5)


def mark_crossing(ax: Axes, x: float, y: float, colour: str, label: str) -> None:
    """A triangle where a mean curve first reaches a target line (its x is in the legend)."""
    ax.plot(
        [x],
        [y],
        "v",
        markersize=9,
        color=colour,
        markeredgecolor="black",
        markeredgewidth=0.8,
        zorder=5,
        label=CROSSING_LABEL,
        gid=f"cross-{label}",
    )


def mark_off_scale(ax: Axes, x: float, y: float, ylim: Sequence[float], colour: str) -> None:
    """A value beyond the figure's ylim: an arrowhead at the edge, the value under (over) it."""
    low, high = ylim
    if low <= y <= high:
        return
    edge, marker, offset, align = (high, "^", -8, "top") if y > high else (low, "v", 8, "bottom")
    ax.plot(
        [x],
        [edge],
        marker,
        markersize=9,
        color=colour,
        clip_on=False,
        zorder=5,
        label="_nolegend_",
    )
    ax.annotate(
        f"{y:.3g}\noff scale",
        (x, edge),
        xytext=(0, offset),
        textcoords="offset points",
        ha="center",
        va=align,
        fontsize=7,
        color=colour,
    )


def finish(fig: Figure, spec: FigureSpec, settings: Sequence[float] = ()) -> Figure:
    """Scales, limits and the one legend outside the data. `settings`: the x values of a
    figure of run settings (a handful of batches or ratios), ticked and written plainly
    (4096, 0.001) instead of as a log axis's powers of ten."""
    from matplotlib.ticker import NullFormatter

    first = fig.axes[0]
    if spec.logx:
        first.set_xscale("log")
    if spec.logy:
        first.set_yscale("log")
    for axis in [first.xaxis] * spec.logx + [first.yaxis] * spec.logy:
        axis.set_major_formatter(plain_log_formatter())
        axis.set_minor_formatter(plain_log_formatter())
    if 0 < len(settings) <= 8:
        first.set_xticks(list(settings), [f"{x:g}" for x in settings])
        first.xaxis.set_minor_formatter(NullFormatter())
    if spec.invert_x:
        first.invert_xaxis()
    if spec.ylim is not None:
        first.set_ylim(*spec.ylim)
    entries: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        if len(fig.axes) == 1:
            # under one axes: three columns of short entries, two of long ones
            columns = 2 if max(map(len, entries)) > SHORT_ENTRY_CHARS else 3
        else:
            # as many columns as the panels have, so the legend is no wider than they are
            columns = len({ax.get_subplotspec().colspan.start for ax in fig.axes})
        fig.legend(
            list(entries.values()),
            list(entries),
            loc="outside lower center",
            ncols=min(columns, len(entries)),
            fontsize=LEGEND_FONT,
            frameon=False,
        )
    return fig


def plain_log_formatter():
    """matplotlib's log-axis labelling (which ticks get a label, minor ones only on a short
    axis) written plainly: 0.01, 3, 4096 rather than 10^-2 and 3 x 10^0."""
    from matplotlib.ticker import LogFormatterSciNotation

    class PlainLogFormatter(LogFormatterSciNotation):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return f"{x:g}" if super().__call__(x, pos) else ""

    return PlainLogFormatter(labelOnlyBase=False)


def save(fig: Figure, path: Path) -> Path:
    """Write `fig` as SVG (no date, fixed ids: the same runs give the same file) or as PNG at
    PNG_SCALE times the screen resolution; the suffix of `path` says which."""
    from matplotlib import rc_context

    if path.suffix not in (".svg", ".png"):
        raise UserError(f"figure file {path.name} must end in .svg or .png")
    path.parent.mkdir(parents=True, exist_ok=True)
    # the salt fixes the SVG's element ids (a PNG has none, nor a date: the format follows path)
    with rc_context({"svg.hashsalt": "repro-report"}):
        fig.savefig(path, metadata={"Date": None}, dpi=BASE_DPI * PNG_SCALE)
    return path
