"""The index page over all papers' reports, as Markdown and as self-contained HTML.

It opens with one line per paper: its outcome claims counted by verdict and a link to its
page (or why it has none, or the command that runs it). Then the claims of every paper, one
table per scale, the papers' figures (headline first) and the environment. Cells are text
or a `Link`; the HTML reuses the per-paper reports' stylesheet and verdict colours, and
refers only to the figures the per-paper reports wrote (paths relative to the index, so the
reports directory can be moved or served as a whole).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from repro.report.claims import SCALES
from repro.report.index import Index, Section
from repro.report.page import CHECKS_TITLE
from repro.report.render import (
    CSS,
    Code,
    Link,
    Table,
    html_cell,
    html_table,
    markdown_table,
    md_cell,
)
from repro.report.seeds import VERDICTS_TEXT, model_checks, outcomes, summary
from repro.report.summary import checks_summary, with_unit

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


def _claim_rows(sections: Sequence[Section], checks: bool = False) -> list[list]:
    """One row per outcome claim (per model check with `checks`) of every section."""
    rows: list[list] = []
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


def paper_lines(index: Index) -> list[tuple]:
    """One line per paper and scale: its outcome claims by verdict and its page; a paper
    that could not be reported says why, one not run names the command that runs it."""
    lines: list[tuple] = []
    for s in index.sections:
        if s.refused:
            lines.append((f"{s.paper}, scale {s.scale}: not reported: {s.refused}",))
            continue
        counted = f"{len(outcomes(s.results))} outcome claims: {summary(s.results)}"
        if model_checks(s.results):
            counted += f"; model checks: {checks_summary(s.results)}"
        lines.append((Link(s.paper, s.where), f", scale {s.scale}: {counted} ({s.title})"))
    for p in index.not_run:
        lines.append((f"{p.paper}: not run; run it with ", Code(p.command), f" ({p.title})"))
    return lines


def _tables(index: Index) -> list[Table]:
    """The claims tables, one per scale so that numbers of different scales never share a
    table, then the papers not run."""
    tables = []
    for scale in SCALES:
        at_scale = [s for s in index.sections if s.scale == scale]
        if at_scale:
            rows = _claim_rows(at_scale)
            tables.append(Table(f"Claims at scale {scale}", CLAIM_HEADERS, rows, VERDICT_COL))
            checks = _claim_rows(at_scale, checks=True)
            if checks:
                title = f"{CHECKS_TITLE} at scale {scale}"
                tables.append(Table(title, CLAIM_HEADERS, checks, VERDICT_COL))
    if index.not_run:
        rows = [[p.paper, p.title, "not run", p.command] for p in index.not_run]
        tables.append(Table("Papers not run", ["paper", "title", "status", "run it with"], rows, 2))
    return tables


def _figure_dir(section: Section) -> str:
    return Path(section.where).parent.as_posix()


def _figures(section: Section) -> list:
    """The section's figures, the headline first."""
    return sorted(section.figures, key=lambda f: not f.headline)


def to_markdown(index: Index, environment: list[list[str]]) -> str:
    out = ["# Reproduction index", "", *[f"- {md_cell(line)}" for line in paper_lines(index)], ""]
    out += [f"Runs read from `{index.runs_root}`.  ", f"Regenerate this page: `{index.command}`  "]
    out += [f"Verdicts: {VERDICTS_TEXT}.", ""]
    for table in _tables(index):
        out += markdown_table(table)
    for s in index.sections:
        out += [f"## {s.title} ({s.paper}, scale {s.scale})", ""]
        out += [f"[Full report]({s.where}). {_summary(s)}  ", f"Runs: `{s.reproduce}`", ""]
        for fig in _figures(s):
            if fig.file:
                out += [f"![{fig.title}]({_figure_dir(s)}/{fig.file})", ""]
                out += [f"*{fig.title}.* {fig.caption} Regenerate: `{s.command}`", ""]
            else:
                out += [f"**{fig.title}**: not drawn: {fig.missing}", ""]
    env = Table("Environment (machine that built this page)", ["", "value"], environment)
    return "\n".join([*out, *markdown_table(env)])


def _html_section(s: Section) -> list[str]:
    e = html.escape
    out = [
        f'<h2 id="{e(s.paper)}-{e(s.scale)}">{e(s.title)} ({e(s.paper)}, scale {e(s.scale)})</h2>',
        f'<p><a href="{e(s.where)}">Full report</a>. {e(_summary(s))}<br>'
        f"Runs: <code>{e(s.reproduce)}</code></p>",
    ]
    for fig in _figures(s):
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
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Reproduction index</title><style>{CSS}</style></head><body>",
        "<h1>Reproduction index</h1>",
        '<ul class="papers">',
        *[f"<li>{html_cell(line)}</li>" for line in paper_lines(index)],
        "</ul>",
        f"<p>Runs read from <code>{e(index.runs_root)}</code>. Regenerate this page: "
        f"<code>{e(index.command)}</code></p>",
        f'<p class="rule">Verdicts: {e(VERDICTS_TEXT)}.</p>',
    ]
    for table in _tables(index):
        out += html_table(table)
    for s in index.sections:
        out += _html_section(s)
    env = Table("Environment (machine that built this page)", ["", "value"], environment)
    out += html_table(env)
    out.append("</body></html>")
    return "\n".join(out) + "\n"
