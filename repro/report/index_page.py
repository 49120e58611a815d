"""The index page over all papers' reports, as Markdown and as self-contained HTML.

It opens with one line per paper: its outcome claims counted by verdict and a link to its
page (or why it has none, or the command that runs it). Then the claims of every paper, one
table per scale, the papers' figures (headline first) and the environment. It is written by
the reports' page writer (`repro.pages.writer`), so it shares their stylesheet and verdict
colours, and refers only to the figures the per-paper reports wrote (paths relative to the
index, so the reports directory can be moved or served as a whole).

The environment the index states is the machine that built it (`repro.track.provenance`'s
`environment_rows`); the runs' own settings (seeds, workers, network model) come from the
runs' configs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from repro.claims.claims_file import SCALES
from repro.claims.verdicts import VERDICTS_TEXT, model_checks, outcomes, summary
from repro.pages import writer
from repro.pages.writer import Code, FigureOut, Heading, Items, LineBreak, Link, Page, Para, Table
from repro.report.index import Index, Section
from repro.report.page import CHECKS_TITLE
from repro.report.summary import claims_counts, with_unit

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
        if s.refused and not checks:  # a refused section has no results
            rows.append(
                [link, "—", f"refused: {s.refused}", "—", "—", "—", "refused", s.scale, "—"]
            )
        for r in model_checks(s.results) if checks else outcomes(s.results):
            claim = [s.paper, r.claim.id, r.claim.statement]
            ours = [r.ours_text(r.claim.unit), r.per_seed_text(), r.verdict_text()]
            rows.append([*claim, with_unit(r.claim.published, r.claim.unit), *ours, s.scale, link])
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
        counted = f"{len(outcomes(s.results))} outcome claims: {claims_counts(s.results)}"
        lines.append((Link(s.paper, s.where), f", scale {s.scale}: {counted} ({s.title})"))
    for p in index.not_run:
        lines.append((f"{p.paper}: not run; run it with ", Code(p.command), f" ({p.title})"))
    return lines


def _tables(index: Index) -> list[Table]:
    """The claims tables, one per scale so that numbers of different scales never share a
    table, the largest scale (the nearest the paper's) first, then the papers not run."""
    tables = []
    for scale in reversed(SCALES):
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


def _figure(section: Section, fig: FigureOut) -> FigureOut:
    """A report's figure as the index shows it: found from the index, no anchor of its own
    (a paper's figures appear once per scale), the command that redraws it in its caption."""
    if not fig.file:
        return fig
    file = f"{Path(section.where).parent.as_posix()}/{fig.file}"
    caption = (fig.caption, " Regenerate: ", Code(section.command))
    return replace(fig, id="", file=file, caption=caption)


def _section(s: Section) -> list:
    """A paper at a scale: a link to its report, its runs, its figures (the headline first)."""
    runs = (Link("Full report", s.where), f". {_summary(s)}", LineBreak(), "Runs: ")
    figures = sorted(s.figures, key=lambda f: not f.headline)
    heading = Heading(f"{s.title} ({s.paper}, scale {s.scale})", f"{s.paper}-{s.scale}")
    return [heading, Para((*runs, Code(s.reproduce))), *[_figure(s, f) for f in figures]]


def index_page(index: Index, environment: list[list[str]]) -> Page:
    """The index (see module doc); `environment` the rows of the machine that built it."""
    where = ("Runs read from ", Code(index.runs_root), ". Regenerate this page: ")
    blocks = [
        Items(paper_lines(index), "papers"),
        Para((*where, Code(index.command))),
        Para(f"Verdicts: {VERDICTS_TEXT}.", "rule"),
        *_tables(index),
        *[block for s in index.sections for block in _section(s)],
    ]
    env = Table("Environment (machine that built this page)", ["", "value"], environment)
    return Page("Reproduction index", [*blocks, env])


def to_markdown(index: Index, environment: list[list[str]]) -> str:
    return writer.to_markdown(index_page(index, environment))


def to_html(index: Index, environment: list[list[str]]) -> str:
    return writer.to_html(index_page(index, environment))
