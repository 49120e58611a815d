"""`repro sweep show`'s `pareto.html`: the front as a page that needs nothing but a browser.

One self-contained file: the figure as inline SVG written here (no plotting library, no
network), every completed trial a point whose `<title>` holds its settings and objectives (a
browser shows it on hover, and a few lines of inline script copy it into a box beside the
figure), the front's points coloured by the colour parameter and labelled by trial number,
the knee an open ring around its point, and under the figure the front as a table. The page
around the figure is written by the reports' page writer (`repro.pages.writer`), its own
rules (`STYLE`) after the shared stylesheet.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from repro.pages.writer import Cell, Page, Para, Raw, Table, to_html
from repro.sweep.front import OTHER, TRIAL, Front, coordinate
from repro.sweep.front_plot import axis_name

WIDTH, HEIGHT = 880, 500
LEFT, RIGHT, TOP, BOTTOM = 80, 210, 20, 56
"""Plot area margins; the legend sits in the right one."""

STYLE = """
body { font-family: sans-serif; margin: 1.5em; max-width: 1200px; }
.wrap { display: flex; gap: 1em; align-items: flex-start; flex-wrap: wrap; }
svg text { font-size: 12px; }
.pt { cursor: pointer; }
.pt:hover { stroke: #000; stroke-width: 2.5; }
#info { min-width: 18em; background: #f4f4f4; padding: 0.6em; white-space: pre; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
"""
SCRIPT = """
for (const p of document.querySelectorAll('.pt')) {
  p.addEventListener('mouseenter', () => {
    document.getElementById('info').textContent = p.querySelector('title').textContent;
  });
}
"""


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def settings(row: dict[str, Any], role: str) -> str:
    """A trial's hover text: its number and role, its parameters, its objectives."""
    pairs = [*row["params"].items(), *row["values"].items()]
    return "\n".join([f"trial {row['trial']} ({role})", *(f"{k} = {_fmt(v)}" for k, v in pairs)])


class _Scale:
    """Data to pixels along one axis (of the values' log10 with `log`), padded by 6 % of the
    span on each side; `lo`, `hi` and the ticks are on the axis's own scale."""

    def __init__(self, values: list[float], start: float, stop: float, log: bool = False):
        self.log = log
        lo, hi = min(map(self.axis, values)), max(map(self.axis, values))
        pad = 0.06 * (hi - lo) if hi > lo else abs(lo) * 0.05 or 0.5
        self.lo, self.hi, self.start, self.stop = lo - pad, hi + pad, start, stop

    def axis(self, v: float) -> float:
        return math.log10(v) if self.log else v

    def place(self, t: float) -> float:
        """The pixel of `t` on the axis's scale."""
        return self.start + (t - self.lo) / (self.hi - self.lo) * (self.stop - self.start)

    def __call__(self, v: float) -> float:
        return self.place(self.axis(v))

    def label(self, t: float) -> str:
        return f"{10**t:.3g}" if self.log else f"{t:.6g}"

    def ticks(self) -> list[float]:
        """Round values on the axis's scale: decades on a log axis that spans two."""
        from matplotlib.ticker import LogLocator, MaxNLocator

        if self.log:
            decades = LogLocator().tick_values(10**self.lo, 10**self.hi)
            inside = [t for t in map(math.log10, decades) if self.lo <= t <= self.hi]
            if len(inside) >= 2:
                return inside
        ticks = MaxNLocator(nbins=6).tick_values(self.lo, self.hi)
        return [t for t in ticks if self.lo <= t <= self.hi]


def _axes(sx: _Scale, sy: _Scale, xname: str, yname: str) -> list[str]:
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
    out = [
        f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#444"/>'
    ]
    for t in sx.ticks():
        px = sx.place(t)
        out.append(f'<line x1="{px:.1f}" y1="{y1}" x2="{px:.1f}" y2="{y0}" stroke="#eee"/>')
        out.append(f'<text x="{px:.1f}" y="{y0 + 16}" text-anchor="middle">{sx.label(t)}</text>')
    for t in sy.ticks():
        py = sy.place(t)
        out.append(f'<line x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{py + 4:.1f}" text-anchor="end">{sy.label(t)}</text>')
    out.append(
        f'<text x="{(x0 + x1) / 2}" y="{HEIGHT - 14}" text-anchor="middle">'
        f"{html.escape(xname)}</text>"
    )
    out.append(
        f'<text transform="translate(18,{(y0 + y1) / 2}) rotate(-90)" text-anchor="middle">'
        f"{html.escape(yname)}</text>"
    )
    return out


def _point(front: Front, row: dict[str, Any], px: float, py: float, on_front: bool) -> str:
    knee = on_front and row["trial"] == front.knee_row["trial"]
    if front.ring_word == "best":
        role = "best" if knee else "other trial"
    else:
        role = "knee of the front" if knee else "on the front" if on_front else "dominated"
    title = html.escape(settings(row, role))
    if on_front:
        look = f'r="6" fill="{front.colour(row)}" stroke="#fff" stroke-width="1"'
    else:
        look = f'r="4.5" fill="#fff" stroke="{front.colour(row)}" stroke-width="1.4"'
    return (
        f'<circle class="pt" data-trial="{row["trial"]}" cx="{px:.1f}" cy="{py:.1f}" {look}>'
        f"<title>{title}</title></circle>"
    )


def _legend(front: Front) -> list[str]:
    x, y = WIDTH - RIGHT + 20, TOP + 14
    out = []
    if front.colour_by:
        name = html.escape(front.colour_by)
        out.append(f'<text x="{x}" y="{y}" font-weight="bold">{name}</text>')
        y += 20
    present = {front.colour(r) for r in front.trials}
    for value, colour in front.colours().items():
        if colour in present:
            out.append(f'<circle cx="{x + 6}" cy="{y - 4}" r="6" fill="{colour}"/>')
            out.append(f'<text x="{x + 18}" y="{y}">{html.escape(str(value))}</text>')
            y += 20
    out.append(
        f'<circle cx="{x + 6}" cy="{y - 4}" r="4.5" fill="#fff" stroke="{OTHER}"/>'
        f'<text x="{x + 18}" y="{y}">{front.other_word}</text>'
    )
    y += 22
    out.append(
        f'<circle cx="{x + 6}" cy="{y - 4}" r="11" fill="none" stroke="#000" stroke-width="2"/>'
        f'<text x="{x + 22}" y="{y}">{front.ring_word}: trial {front.knee_row["trial"]}</text>'
    )
    return out


def front_svg(front: Front) -> str:
    """The figure: every completed trial, the front joined and coloured, the knee ringed."""
    x, y = front.axes()
    sx = _Scale([coordinate(r, x) for r in front.trials], LEFT, WIDTH - RIGHT, front.log_x())
    sy = _Scale([coordinate(r, y) for r in front.trials], HEIGHT - BOTTOM, TOP)

    def at(r: dict[str, Any]) -> tuple[float, float]:
        return sx(coordinate(r, x)), sy(coordinate(r, y))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img">',
        *_axes(sx, sy, axis_name(front, x), axis_name(front, y)),
        *(_point(front, r, *at(r), False) for r in front.dominated()),
    ]
    line = sorted(front.front, key=lambda r: coordinate(r, x))
    if len(line) > 1 and x != TRIAL:
        pts = " ".join(f"{px:.1f},{py:.1f}" for px, py in map(at, line))
        out.append(f'<polyline points="{pts}" fill="none" stroke="#555" stroke-width="1"/>')
    for r in front.front:
        px, py = at(r)
        out.append(_point(front, r, px, py, True))
        out.append(f'<text x="{px + 12:.1f}" y="{py - 9:.1f}">#{r["trial"]}</text>')
    kx, ky = at(front.knee_row)
    out.append(
        f'<circle class="knee" cx="{kx:.1f}" cy="{ky:.1f}" '
        'r="11" fill="none" stroke="#000" stroke-width="2"/>'
    )
    out += _legend(front)
    out.append("</svg>")
    return "\n".join(out)


def front_table(front: Front) -> Table:
    """The front under the figure, one row per front trial, the knee (or best) marked."""
    head, rows = front.table(front.ring_word, front.ring_word)
    cells: list[list[Cell]] = [[_fmt(c) for c in row] for row in rows]
    if front.ring_word == "best":
        return Table("The best trial", head, cells)
    plural = "s" if len(front.front) != 1 else ""
    return Table(f"The front: {len(front.front)} trial{plural}", head, cells)


def write_front_page(front: Front, path: Path, title: str, note: str = "") -> Path:
    """Write the page to `path` (a trial's settings show on hover; nothing is fetched);
    `note` is a sentence put before the figure's explanation (e.g. which study it is)."""
    coloured = f", coloured by {front.colour_by}" if front.colour_by else ""
    if front.ring_word == "best":
        how = (
            f"The best of {len(front.trials)} completed trials is filled and ringed (labelled "
            f"by trial number{coloured}); open circles are {front.other_word}."
        )
    else:
        how = (
            f"{len(front.front)} of {len(front.trials)} completed trials are on the front "
            f"(filled, labelled by trial number{coloured}); open circles are "
            f"{front.other_word}; the ring marks the knee (the front point closest to the "
            "ideal with every objective scaled to [0, 1])."
        )
    how += " Hover a point for its trial's settings."
    how = f"{note} {how}" if note else how
    hover = f'<div class="wrap">{front_svg(front)}<pre id="info">hover a point</pre></div>'
    page = Page(title, [Para(how), Raw(hover), front_table(front)], style=STYLE, script=SCRIPT)
    path.write_text(to_html(page), encoding="utf-8")
    return path
