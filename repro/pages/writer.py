"""The one page writer: a page as plain data, written as Markdown and as self-contained HTML.

Every page the suite writes (a paper's report, the index over all reports, a comparison of
runs, a sweep's front and hypervolume pages) is a `Page`: a title, blocks in reading order
and closing notes, so that the Markdown and the HTML of a page show the same content. A
block is a paragraph, a heading, a bulleted list, a table, a figure, preformatted text, or
an inline SVG drawn elsewhere. Inline text (a table cell, a paragraph, a list item, a caption) is a
string, a `Link` (a run's directory, a claim's row), `Code` (a command), a `LineBreak`, or a
tuple of those shown one after another. The HTML carries its own CSS
(`repro.pages.style`, plus a page's own rules and script) and refers only to files
written beside it and to the run directories it links, by paths relative to the page.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from repro.pages.style import CSS

__all__ = ["CSS", "Code", "FigureOut", "Heading", "Link", "Page", "Para", "Table", "fmt"]


def counted(n: int, word: str) -> str:
    """`n word`, with an s unless n is 1: "1 run", "3 runs"."""
    return f"{n} {word}{'' if n == 1 else 's'}"


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


@dataclass(frozen=True)
class LineBreak:
    """A line break inside a paragraph."""


Cell = str | Link | Code | LineBreak | tuple


def cell_text(cell: Cell) -> str:
    """What a cell says, without its links."""
    if isinstance(cell, tuple):
        return "".join(cell_text(part) for part in cell)
    if isinstance(cell, LineBreak):
        return " "
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
    """A table under its title (none when empty); `verdict_col` names the column whose cells
    get a verdict colour; `row_ids` (when given, one per row) are anchors other cells link
    to; `css` a class; `breaks`: whether long words in cells may wrap (off where the cells are
    exact values a reader copies or a script reads back, such as run directories)."""

    title: str
    headers: list[str]
    rows: list[list[Cell]]
    verdict_col: int | None = None
    row_ids: list[str] = field(default_factory=list)
    css: str = ""
    breaks: bool = True


@dataclass(frozen=True)
class FigureOut:
    """A figure of the page: its file (relative to the page), or why it is missing;
    `headline`: the one figure that shows the paper's headline claim, drawn first; `id` an
    anchor (none when empty)."""

    id: str
    title: str
    caption: Cell
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
    """A section heading; its anchor is `anchor`, or else made from its text."""

    text: str
    anchor: str = ""


@dataclass(frozen=True)
class Items:
    """A bulleted list; `css` a class."""

    items: list[Cell]
    css: str = ""


@dataclass(frozen=True)
class Pre:
    """Preformatted text (a table of numbers printed for a terminal)."""

    text: str


@dataclass(frozen=True)
class Raw:
    """HTML drawn elsewhere (an inline SVG figure), as it is (Markdown passes HTML through)."""

    html: str


Block = Para | Heading | Items | Table | FigureOut | Pre | Raw


@dataclass(frozen=True)
class Page:
    """A page: its title, its blocks in reading order, and notes at the end under
    `notes_title`; `style` and `script` are a page's own CSS rules (after the shared ones) and
    inline script (a sweep front's hover box)."""

    title: str
    blocks: list[Block]
    notes: list[str] = field(default_factory=list)
    notes_title: str = "Notes"
    style: str = ""
    script: str = ""


def slug(text: str) -> str:
    """An HTML id from a heading: lower case, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _md_text(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def md_destination(href: str) -> str:
    """A link's target as CommonMark reads it whole: one holding a space or a bracket (a runs
    folder `my runs/`) within <...>, else a space ended the link and it showed as text."""
    if not re.search(r"[\s()<>|]", href):
        return href
    return "<" + re.sub(r"([<>|])", r"\\\1", href) + ">"


def md_cell(cell: Cell, esc: Callable[[str], str] = _md_text) -> str:
    """Inline Markdown; `esc` escapes plain text (a caption's is written as it is)."""
    if isinstance(cell, tuple):
        return "".join(md_cell(part, esc) for part in cell)
    if isinstance(cell, Link):
        text = cell.text.replace("|", "\\|")
        return text if cell.href.startswith("#") else f"[{text}]({md_destination(cell.href)})"
    if isinstance(cell, Code):
        return f"`{cell.text}`"
    if isinstance(cell, LineBreak):
        return "  \n"
    return esc(cell)


def markdown_table(table: Table) -> list[str]:
    out = [f"## {table.title}", ""] if table.title else []
    out.append("| " + " | ".join(md_cell(h) for h in table.headers) + " |")
    out.append("|" + "---|" * len(table.headers))
    out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in table.rows]
    return [*out, ""]


def _md_figure(fig: FigureOut) -> list[str]:
    if fig.file:
        caption = md_cell(fig.caption, str)
        return [f"![{fig.title}]({md_destination(fig.file)})", "", f"*{fig.title}.* {caption}", ""]
    return [f"**{fig.title}**: not drawn: {fig.missing}", ""]


def _md_block(block: Block) -> list[str]:
    if isinstance(block, Table):
        return markdown_table(block)
    if isinstance(block, FigureOut):
        return _md_figure(block)
    if isinstance(block, Heading):
        return [f"## {block.text}", ""]
    if isinstance(block, Items):
        return [*[f"- {md_cell(item)}" for item in block.items], ""]
    if isinstance(block, Pre):
        return ["```", block.text, "```", ""]
    if isinstance(block, Raw):
        return [block.html, ""]
    return [md_cell(block.text), ""]


def to_markdown(page: Page) -> str:
    out = [f"# {page.title}", ""]
    for block in page.blocks:
        out += _md_block(block)
    if page.notes:
        out += [f"## {page.notes_title}", "", *[f"- {note}" for note in page.notes], ""]
    return "\n".join(out)


def breakable(text: str) -> str:
    """`text` escaped, with a line-break opportunity after every '_' and '/' (run labels,
    claim ids and paths are long words that would otherwise widen their column)."""
    return re.sub(r"([_/])", r"\1<wbr>", html.escape(text))


def html_cell(cell: Cell, esc: Callable[[str], str] = breakable) -> str:
    """Inline HTML; `esc` escapes plain text (with break opportunities unless told not to)."""
    if isinstance(cell, tuple):
        return "".join(html_cell(part, esc) for part in cell)
    if isinstance(cell, Link):
        return f'<a href="{html.escape(cell.href)}">{esc(cell.text)}</a>'
    if isinstance(cell, Code):
        return f"<code>{esc(cell.text)}</code>"
    if isinstance(cell, LineBreak):
        return "<br>"
    return esc(cell)


def _css(name: str) -> str:
    return f' class="{html.escape(name)}"' if name else ""


def html_table(table: Table) -> list[str]:
    """The table under its heading, in a box that scrolls sideways when the table is wider
    than the page, so that the page itself never is."""
    e = html.escape
    esc = breakable if table.breaks else e
    out = [f'<h2 id="{slug(table.title)}">{e(table.title)}</h2>'] if table.title else []
    out.append('<div class="table-wrap">')
    heads = "".join(f"<th>{e(h)}</th>" for h in table.headers)
    out.append(f"<table{_css(table.css)}><tr>{heads}</tr>")
    for i, row in enumerate(table.rows):
        cells = []
        for j, cell in enumerate(row):
            verdict = j == table.verdict_col and not isinstance(cell, Link)
            cls = _css(verdict_class(cell_text(cell))) if verdict else ""
            cells.append(f"<td{cls}>{html_cell(cell, esc)}</td>")
        anchor = f' id="{e(table.row_ids[i])}"' if table.row_ids else ""
        out.append(f"<tr{anchor}>" + "".join(cells) + "</tr>")
    return [*out, "</table></div>"]


def html_figure(fig: FigureOut) -> list[str]:
    """The figure (beside the page) and its caption, or the line saying why it was not
    drawn."""
    e = html.escape
    if not fig.file:
        return [f'<p class="missing"><b>{e(fig.title)}</b>: not drawn: {e(fig.missing)}</p>']
    anchor = f' id="{e(fig.id)}"' if fig.id else ""
    return [
        f'<figure{anchor}><img src="{e(fig.file)}" alt="{e(fig.title)}">',
        f"<figcaption><b>{e(fig.title)}.</b> {html_cell(fig.caption, e)}</figcaption></figure>",
    ]


def _html_block(block: Block) -> list[str]:
    e = html.escape
    if isinstance(block, Table):
        return html_table(block)
    if isinstance(block, FigureOut):
        return html_figure(block)
    if isinstance(block, Heading):
        return [f'<h2 id="{e(block.anchor or slug(block.text))}">{e(block.text)}</h2>']
    if isinstance(block, Items):
        items = [f"<li>{html_cell(item)}</li>" for item in block.items]
        return [f"<ul{_css(block.css)}>", *items, "</ul>"]
    if isinstance(block, Pre):
        return [f"<pre>{e(block.text)}</pre>"]
    if isinstance(block, Raw):
        return [block.html]
    return [f"<p{_css(block.css)}>{html_cell(block.text)}</p>"]


def to_html(page: Page) -> str:
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(page.title)}</title><style>{CSS}{page.style}</style></head><body>",
        f"<h1>{e(page.title)}</h1>",
    ]
    for block in page.blocks:
        out += _html_block(block)
    if page.notes:
        notes = [f"<li>{e(n)}</li>" for n in page.notes]
        out += [f"<h2>{e(page.notes_title)}</h2>", "<ul>", *notes, "</ul>"]
    if page.script:
        out.append(f"<script>{page.script}</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
