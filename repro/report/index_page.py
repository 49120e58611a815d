"""The index page over all papers' reports, as Markdown and as self-contained HTML.

Cells are text or a `Link`; the HTML reuses the per-paper reports' stylesheet and verdict
colours, and refers only to the PNGs the per-paper reports wrote (paths relative to the
index, so the reports directory can be moved or served as a whole).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.report.claims import SCALES
from repro.report.index import Index, Section
from repro.report.page import CHECKS_TITLE, with_unit
from repro.report.render import CSS, verdict_class
from repro.report.seeds import VERDICTS_TEXT, model_checks, outcomes, summary


@dataclass(frozen=True)
class Link:
    text: str
    href: str


Cell = str | Link
VERDICT_COL = 6
CLAIM_HEADERS = [
    "paper",
    "claim",
    "statement",
    "published",
    "ours (mean over seeds, 95% CI)",
    "per seed",
    "verdict",
    "scale",
    "report",
]


def _claim_rows(sections: Sequence[Section], checks: bool = False) -> list[list[Cell]]:
    """One row per outcome claim (per model check with `checks`) of every section."""
    rows: list[list[Cell]] = []
    for s in sections:
        link = Link(s.paper, s.where)
        if s.refused:
            if not checks:
                rows.append(
                    [link, "—", f"refused: {s.refused}", "—", "—", "—", "refused", s.scale, "—"]
                )
            continue
        for r in model_checks(s.results) if checks else outcomes(s.results):
            rows.append(
                [
                    s.paper,
                    r.claim.id,
                    r.claim.statement,
                    with_unit(r.claim.published, r.claim.unit),
                    r.ours_text(r.claim.unit),
                    r.per_seed_text(),
                    r.verdict_text(),
                    s.scale,
                    link,
                ]
            )
    return rows


def _summary(section: Section) -> str:
    if section.refused:
        return f"Not reported: {section.refused}"
    return f"{section.runs} runs, seeds {section.seeds or '—'}. Claims: {summary(section.results)}."


def _tables(index: Index) -> list[tuple[str, list[str], list[list[Cell]], int | None]]:
    """(title, headers, rows, verdict column) of every table, claims tables first, one per
    scale so that numbers of different scales never share a table."""
    tables = []
    for scale in SCALES:
        at_scale = [s for s in index.sections if s.scale == scale]
        if at_scale:
            title = f"Claims at scale {scale}"
            tables.append((title, CLAIM_HEADERS, _claim_rows(at_scale), VERDICT_COL))
            checks = _claim_rows(at_scale, checks=True)
            if checks:
                title = f"{CHECKS_TITLE} at scale {scale}"
                tables.append((title, CLAIM_HEADERS, checks, VERDICT_COL))
    if index.not_run:
        rows: list[list[Cell]] = [[p.paper, p.title, "not run", p.command] for p in index.not_run]
        tables.append(("Papers not run", ["paper", "title", "status", "run it with"], rows, 2))
    return tables


def _md(cell: Cell) -> str:
    text = f"[{cell.text}]({cell.href})" if isinstance(cell, Link) else cell
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(title: str, headers: list[str], rows: list[list[Cell]]) -> list[str]:
    out = [f"## {title}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return [*out, *["| " + " | ".join(_md(c) for c in row) + " |" for row in rows], ""]


def _figure_dir(section: Section) -> str:
    return Path(section.where).parent.as_posix()


def to_markdown(index: Index, environment: list[list[str]]) -> str:
    out = ["# Reproduction index", "", f"Runs read from `{index.runs_root}`.  "]
    out += [f"Regenerate this page: `{index.command}`  ", f"Verdicts: {VERDICTS_TEXT}.", ""]
    for title, headers, rows, _ in _tables(index):
        out += _md_table(title, headers, rows)
    for s in index.sections:
        out += [f"## {s.title} ({s.paper}, scale {s.scale})", ""]
        out += [f"[Full report]({s.where}). {_summary(s)}  ", f"Runs: `{s.reproduce}`", ""]
        for fig in s.figures:
            if fig.file:
                out += [f"![{fig.title}]({_figure_dir(s)}/{fig.file})", ""]
                out += [f"*{fig.title}.* {fig.caption} Regenerate: `{s.command}`", ""]
            else:
                out += [f"**{fig.title}**: not drawn: {fig.missing}", ""]
    out += _md_table("Environment (machine that built this page)", ["", "value"], environment)
    return "\n".join(out)


def _html_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        return f'<a href="{html.escape(cell.href)}">{html.escape(cell.text)}</a>'
    return html.escape(cell)


def _html_table(
    title: str, headers: list[str], rows: list[list[Cell]], verdict_col: int | None
) -> list[str]:
    e = html.escape
    out = [f"<h2>{e(title)}</h2>", "<table>"]
    out.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr>")
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            verdict = i == verdict_col and isinstance(cell, str)
            cls = f' class="{e(verdict_class(cell))}"' if verdict else ""
            cells.append(f"<td{cls}>{_html_cell(cell)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return [*out, "</table>"]


def _html_section(s: Section) -> list[str]:
    e = html.escape
    out = [
        f'<h2 id="{e(s.paper)}-{e(s.scale)}">{e(s.title)} ({e(s.paper)}, scale {e(s.scale)})</h2>',
        f'<p><a href="{e(s.where)}">Full report</a>. {e(_summary(s))}<br>'
        f"Runs: <code>{e(s.reproduce)}</code></p>",
    ]
    for fig in s.figures:
        if fig.file:
            src = f"{_figure_dir(s)}/{fig.file}"
            out += [
                f'<figure><img src="{e(src)}" alt="{e(fig.title)}">',
                f"<figcaption><b>{e(fig.title)}.</b> {e(fig.caption)} Regenerate: "
                f"<code>{e(s.command)}</code></figcaption></figure>",
            ]
        else:
            out.append(f'<p class="missing"><b>{e(fig.title)}</b>: not drawn: {e(fig.missing)}</p>')
    return out


def to_html(index: Index, environment: list[list[str]]) -> str:
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Reproduction index</title><style>{CSS}.v-refused {{ background: #f7d4d4; }}"
        "</style></head><body>",
        "<h1>Reproduction index</h1>",
        f"<p>Runs read from <code>{e(index.runs_root)}</code>. Regenerate this page: "
        f"<code>{e(index.command)}</code></p>",
        f"<p>Verdicts: {e(VERDICTS_TEXT)}.</p>",
    ]
    for title, headers, rows, verdict_col in _tables(index):
        out += _html_table(title, headers, rows, verdict_col)
    for s in index.sections:
        out += _html_section(s)
    env_rows: list[list[Cell]] = [list(row) for row in environment]
    out += _html_table("Environment (machine that built this page)", ["", "value"], env_rows, None)
    out.append("</body></html>")
    return "\n".join(out) + "\n"
