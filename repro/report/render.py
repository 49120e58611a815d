"""Writing a report page as Markdown and as one self-contained HTML file.

The page is plain data (`Page`: a title, blocks in reading order, notes) so both formats show
the same content. A block is a paragraph, a heading, a table or a figure; a table cell or a
paragraph is text, a `Link` (a run's directory, its wandb page, a claim's row), `Code` (a
command), or a tuple of those shown one after another. The HTML carries its own CSS
(`repro.report.page_style`) and refers only to the figures written beside it and to the run
directories it links, by paths relative to the page.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from typing import Any

from repro.report.page_style import CSS

__all__ = ["CSS", "Code", "FigureOut", "Heading", "Link", "Page", "Para", "Table", "fmt"]


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


@dataclass(frozen=True)
class Link:
    """A link; `href` relative to the page, or `#id` for a place on the page itself (plain
    text in Markdown, which has no anchors on table rows)."""

    text: str
    href: str


@dataclass(frozen=True)
class Code:
    """A command or path, shown in a monospace font."""

    text: str


Cell = str | Link | Code | tuple


def cell_text(cell: Cell) -> str:
    """What a cell says, without its links."""
    if isinstance(cell, tuple):
        return "".join(cell_text(part) for part in cell)
    return cell if isinstance(cell, str) else cell.text


# Longest first, so that "not reproduced" is not read as "reproduced".
VERDICT_WORDS = sorted(
    [
        "reproduced",
        "partly",
        "not reproduced",
        "undecided",
        "inconclusive",
        "not run",
        "not measured",
        "not assessed",
        "refused",
        "holds",
        "partly holds",
        "does not hold",
    ],
    key=len,
    reverse=True,
)


def verdict_class(verdict: str) -> str:
    """The CSS class of a verdict cell: the verdict word(s) it starts with, without the seeds,
    interval or note that follow ("undecided at 3 seeds" -> "v-undecided")."""
    word = next((w for w in VERDICT_WORDS if verdict.startswith(w)), verdict.split(" ")[0])
    return "v-" + word.replace(" ", "-")


@dataclass(frozen=True)
class Table:
    """A titled table; `verdict_col` names the column whose cells get a verdict colour;
    `row_ids` (when given, one per row) are anchors other cells link to; `css` a class."""

    title: str
    headers: list[str]
    rows: list[list[Cell]]
    verdict_col: int | None = None
    row_ids: list[str] = field(default_factory=list)
    css: str = ""


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
class Para:
    """A paragraph; `css` a class (e.g. "rule" for the small print of the verdict rule)."""

    text: Cell
    css: str = ""


@dataclass(frozen=True)
class Heading:
    text: str


Block = Para | Heading | Table | FigureOut


@dataclass(frozen=True)
class Page:
    """A report: its title, its blocks in reading order, and notes at the end."""

    title: str
    blocks: list[Block]
    notes: list[str] = field(default_factory=list)

    def tables(self) -> list[Table]:
        return [b for b in self.blocks if isinstance(b, Table)]


def slug(text: str) -> str:
    """An HTML id from a heading: lower case, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def md_cell(cell: Cell) -> str:
    if isinstance(cell, tuple):
        return "".join(md_cell(part) for part in cell)
    if isinstance(cell, Link):
        text = cell.text.replace("|", "\\|")
        return text if cell.href.startswith("#") else f"[{text}]({cell.href})"
    if isinstance(cell, Code):
        return f"`{cell.text}`"
    return cell.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: Table) -> list[str]:
    out = [f"## {table.title}", ""]
    out.append("| " + " | ".join(md_cell(h) for h in table.headers) + " |")
    out.append("|" + "---|" * len(table.headers))
    out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in table.rows]
    return [*out, ""]


def _md_figure(fig: FigureOut) -> list[str]:
    if fig.file:
        return [f"![{fig.title}]({fig.file})", "", f"*{fig.title}.* {fig.caption}", ""]
    return [f"**{fig.title}**: not drawn: {fig.missing}", ""]


def to_markdown(page: Page) -> str:
    out = [f"# {page.title}", ""]
    for block in page.blocks:
        if isinstance(block, Table):
            out += markdown_table(block)
        elif isinstance(block, FigureOut):
            out += _md_figure(block)
        elif isinstance(block, Heading):
            out += [f"## {block.text}", ""]
        else:
            out += [md_cell(block.text), ""]
    if page.notes:
        out += ["## Notes", "", *[f"- {note}" for note in page.notes], ""]
    return "\n".join(out)


def breakable(text: str) -> str:
    """`text` escaped, with a line-break opportunity after every '_' and '/' (run labels,
    claim ids and paths are long words that would otherwise widen their column)."""
    return re.sub(r"([_/])", r"\1<wbr>", html.escape(text))


def html_cell(cell: Cell) -> str:
    if isinstance(cell, tuple):
        return "".join(html_cell(part) for part in cell)
    if isinstance(cell, Link):
        return f'<a href="{html.escape(cell.href)}">{breakable(cell.text)}</a>'
    if isinstance(cell, Code):
        return f"<code>{breakable(cell.text)}</code>"
    return breakable(cell)


def html_table(table: Table) -> list[str]:
    """The table under its heading, in a box that scrolls sideways when the table is wider
    than the page, so that the page itself never is."""
    e = html.escape
    css = f' class="{e(table.css)}"' if table.css else ""
    out = [f'<h2 id="{slug(table.title)}">{e(table.title)}</h2>', '<div class="table-wrap">']
    out.append(f"<table{css}><tr>" + "".join(f"<th>{e(h)}</th>" for h in table.headers) + "</tr>")
    for i, row in enumerate(table.rows):
        cells = []
        for j, cell in enumerate(row):
            verdict = j == table.verdict_col and not isinstance(cell, Link)
            cls = f' class="{e(verdict_class(cell_text(cell)))}"' if verdict else ""
            cells.append(f"<td{cls}>{html_cell(cell)}</td>")
        anchor = f' id="{e(table.row_ids[i])}"' if table.row_ids else ""
        out.append(f"<tr{anchor}>" + "".join(cells) + "</tr>")
    return [*out, "</table></div>"]


def html_figure(fig: FigureOut) -> list[str]:
    """The figure (beside the page) and its caption, or the line saying why it was not
    drawn."""
    e = html.escape
    if not fig.file:
        return [f'<p class="missing"><b>{e(fig.title)}</b>: not drawn: {e(fig.missing)}</p>']
    return [
        f'<figure id="{e(fig.id)}"><img src="{e(fig.file)}" alt="{e(fig.title)}">',
        f"<figcaption><b>{e(fig.title)}.</b> {e(fig.caption)}</figcaption></figure>",
    ]


def to_html(page: Page) -> str:
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(page.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(page.title)}</h1>",
    ]
    for block in page.blocks:
        if isinstance(block, Table):
            out += html_table(block)
        elif isinstance(block, FigureOut):
            out += html_figure(block)
        elif isinstance(block, Heading):
            out.append(f'<h2 id="{slug(block.text)}">{e(block.text)}</h2>')
        else:
            css = f' class="{e(block.css)}"' if block.css else ""
            out.append(f"<p{css}>{html_cell(block.text)}</p>")
    if page.notes:
        out += ["<h2>Notes</h2>", "<ul>", *[f"<li>{e(n)}</li>" for n in page.notes], "</ul>"]
    out.append("</body></html>")
    return "\n".join(out) + "\n"
