"""Writing a report page as Markdown and as one self-contained HTML file.

The page is plain data (`Page`: tables, figures, notes) so both formats show the same
content; the HTML carries its own CSS and refers only to the PNGs written beside it.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from typing import Any


def fmt(value: Any) -> str:
    """A value as a table cell: 4 significant digits, "never reached" for inf, "undefined" for
    NaN (a ratio of two runs that both never reached the target), "—" for None."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if math.isinf(value):
            return "never reached"
        if math.isnan(value):
            return "undefined"
        return f"{value:.4g}"
    return str(value)


def verdict_class(verdict: str) -> str:
    """The CSS class of a verdict cell: its verdict word(s), without the seeds, interval or
    magnitude note that follow ("undecided at 3 seeds" -> "v-undecided")."""
    word = re.split(r" at |;|,", verdict, maxsplit=1)[0].strip()
    return "v-" + word.replace(" ", "-")


@dataclass(frozen=True)
class Table:
    """A titled table; `verdict_col` names the column whose cells get a verdict colour."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    verdict_col: int | None = None


@dataclass(frozen=True)
class FigureOut:
    """A figure of the page: its file name beside the page, or why it is missing;
    `headline`: the one figure that shows the paper's headline claim, drawn first."""

    id: str
    title: str
    caption: str
    file: str | None = None
    missing: str = ""
    headline: bool = False


@dataclass(frozen=True)
class Page:
    """A report: title and lead lines, tables before the figures, figures, tables after."""

    title: str
    lines: list[str]
    tables_before: list[Table]
    figures: list[FigureOut]
    tables_after: list[Table]
    notes: list[str] = field(default_factory=list)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: Table) -> list[str]:
    out = [f"## {table.title}", ""]
    out.append("| " + " | ".join(_md_cell(h) for h in table.headers) + " |")
    out.append("|" + "---|" * len(table.headers))
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    return [*out, ""]


def to_markdown(page: Page) -> str:
    out = [f"# {page.title}", "", *[f"{line}  " for line in page.lines], ""]
    for table in page.tables_before:
        out += markdown_table(table)
    out += ["## Figures", ""]
    for fig in page.figures:
        if fig.file:
            out += [f"![{fig.title}]({fig.file})", "", f"*{fig.title}.* {fig.caption}", ""]
        else:
            out += [f"**{fig.title}**: not drawn: {fig.missing}", ""]
    for table in page.tables_after:
        out += markdown_table(table)
    if page.notes:
        out += ["## Notes", "", *[f"- {note}" for note in page.notes], ""]
    return "\n".join(out)


CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; }
.v-reproduced { background: #d8f0d8; } .v-partly { background: #fff1c4; }
.v-undecided { background: #fbd9b0; } .v-inconclusive { background: #e6d4f0; }
.v-not-reproduced { background: #f7d4d4; } .v-not-run, .v-not-measured,
.v-not-assessed { background: #e8e8e8; }
.missing { color: #a00; }
"""


def _html_table(table: Table) -> list[str]:
    e = html.escape
    out = [f"<h2>{e(table.title)}</h2>", "<table>"]
    out.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in table.headers) + "</tr>")
    for row in table.rows:
        cells = []
        for i, cell in enumerate(row):
            cls = f' class="{e(verdict_class(cell))}"' if i == table.verdict_col else ""
            cells.append(f"<td{cls}>{e(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return [*out, "</table>"]


def to_html(page: Page) -> str:
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(page.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(page.title)}</h1>",
        *[f"<p>{e(line)}</p>" for line in page.lines],
    ]
    for table in page.tables_before:
        out += _html_table(table)
    out.append("<h2>Figures</h2>")
    for fig in page.figures:
        if fig.file:
            out += [
                f'<figure id="{e(fig.id)}"><img src="{e(fig.file)}" alt="{e(fig.title)}">',
                f"<figcaption><b>{e(fig.title)}.</b> {e(fig.caption)}</figcaption></figure>",
            ]
        else:
            out.append(f'<p class="missing"><b>{e(fig.title)}</b>: not drawn: {e(fig.missing)}</p>')
    for table in page.tables_after:
        out += _html_table(table)
    if page.notes:
        out += ["<h2>Notes</h2>", "<ul>", *[f"<li>{e(n)}</li>" for n in page.notes], "</ul>"]
    out.append("</body></html>")
    return "\n".join(out) + "\n"
