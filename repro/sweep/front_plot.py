"""A Pareto front drawn with matplotlib: `repro sweep show`'s `pareto.png` and a panel of the
Top-k report's CR front.

Each front point is filled in its colour parameter's colour (the collective, say) and labelled
(by trial number here, by the searched ratio in the report); the knee is an open ring around
its point, so the point and its colour stay visible; the dominated trials are faint open
circles behind the front, which is joined by a thin line in x order; the legend stands
outside the axes, so it never covers a point.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from repro.sweep.front import OTHER, TRIAL, Front, coordinate, coordinates

KNEE_RING = {"s": 260, "facecolors": "none", "edgecolors": "black", "linewidths": 1.6, "zorder": 4}
FRONT_POINT = {"s": 42, "edgecolors": "white", "linewidths": 0.6, "zorder": 3}
"""How a front point is drawn here and in the report's panel against the searched number."""


def trial_label(row: dict[str, Any]) -> str:
    return f"#{row['trial']}"


def draw_front(
    ax: Any,
    front: Front,
    x: str,
    y: str,
    label: Callable[[dict[str, Any]], str] = trial_label,
) -> None:
    """Draw `front` on `ax`: y against x (objective names, or `TRIAL` for x)."""
    other = front.dominated()
    if other:
        # open circles in their collective's colour: the reader sees where each one lies
        ax.scatter(
            *coordinates(other, x, y),
            s=24,
            facecolors="none",
            edgecolors=[front.colour(r) for r in other],
            linewidths=1.0,
            zorder=1,
        )
        ax.scatter(
            [],
            [],
            s=24,
            facecolors="none",
            edgecolors=OTHER,
            label=f"{front.other_word} ({len(other)}, open)",
        )
    ordered = sorted(front.front, key=lambda r: coordinate(r, x))
    if len(ordered) > 1 and x != TRIAL:
        ax.plot(*coordinates(ordered, x, y), "-", color="#555555", lw=0.8, zorder=2)
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in front.front:
        groups.setdefault(front.colour(row), []).append(row)
    names = {colour: value for value, colour in reversed(front.colours().items())}
    for colour, rows in groups.items():
        name = str(names.get(colour, "front")) if front.colour_by else "front"
        ax.scatter(*coordinates(rows, x, y), color=colour, label=name, **FRONT_POINT)
    for colour in dict.fromkeys(front.colour(r) for r in other):
        if colour not in groups and front.colour_by:  # a collective only off the front
            ax.scatter([], [], s=42, color=colour, label=str(names.get(colour, "other")))
    knee = front.knee_row
    label_knee = f"{front.ring_word}: trial {knee['trial']}"
    ax.scatter(*coordinates([knee], x, y), label=label_knee, **KNEE_RING)
    for row in front.front:
        ax.annotate(
            label(row),
            (coordinate(row, x), coordinate(row, y)),
            textcoords="offset points",
            xytext=(6, 5),
            fontsize=7,
        )


def legend_entries(axes: list[Any], last: tuple[str, ...]) -> tuple[list[Any], list[str]]:
    """The handles and labels of `axes`, each label once, those starting with `last` (the
    dominated trials) after the colours."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(text, handle)
    names = sorted(seen, key=lambda text: text.startswith(last))
    return [seen[n] for n in names], names


def axis_name(front: Front, key: str) -> str:
    if key == TRIAL:
        return "trial number"
    if key not in front.spec.metric_names:  # the searched number
        return f"{key} (searched{', log scale' if front.log_x() else ''})"
    return f"{key} ({front.spec.directions[front.spec.metric_names.index(key)]})"


def plot_front_png(front: Front, path: Path, title: str) -> Path:
    """`repro sweep show`'s front figure: points labelled by trial number, PNG at 2x."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x, y = front.axes()
    fig = Figure(figsize=(8.0, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    draw_front(ax, front, x, y)
    ax.set_xlabel(axis_name(front, x))
    ax.set_ylabel(axis_name(front, y))
    if x == TRIAL:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    elif front.log_x():
        ax.set_xscale("log")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    # the legend to the right of the axes, where it covers no point
    ax.legend(
        *legend_entries([ax], ("dominated", "other")),
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize=8,
        title=front.colour_by,
        title_fontsize=8,
    )
    fig.savefig(path, dpi=200)
    return path
