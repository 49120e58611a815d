"""`repro report all`: every paper's report, then one index page over all of them.

The index (`index.html` and `index.md` in the reports directory) has one claims table per
scale over all papers, a link to each paper's report, each report's figures inline with the
command that regenerates them, the environment, and the papers that have no runs yet with
the command that runs them. Runs of different scales are never put in one table: every
scale of a paper gets its own report and its own section, and a run group whose runs
disagree on the scale is listed as refused (with the reason) instead of being reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from repro.claims.claims_file import SCALES, ClaimsFile, known_papers, load_claims
from repro.claims.fixed_terms import moved
from repro.claims.result import ClaimResult
from repro.claims.seed_caps import check_caps_for_scale
from repro.errors import UserError
from repro.pages.writer import FigureOut
from repro.report.build import render_parts, report_subdir, select_runs
from repro.report.missing_runs import report_command, reproduce_command
from repro.track.series import Run, every_run, seeds_of


@dataclass(frozen=True)
class Section:
    """One paper at one scale: its report (`where`, relative to the index) and its parts, or
    `refused` saying why its runs could not be reported."""

    paper: str
    title: str
    scale: str
    where: str
    command: str
    reproduce: str
    results: list[ClaimResult] = field(default_factory=list)
    figures: list[FigureOut] = field(default_factory=list)
    seeds: str = ""
    runs: int = 0
    refused: str = ""


@dataclass(frozen=True)
class NotRun:
    """A paper with a claims file but no runs under the runs root."""

    paper: str
    title: str
    command: str


@dataclass(frozen=True)
class Index:
    sections: list[Section]
    not_run: list[NotRun]
    runs_root: str
    command: str


def _section(
    claims: ClaimsFile, scale: str, found: Sequence[Run], runs_root: str, out: Path
) -> Section:
    paper = claims.paper
    command = report_command(paper, scale, runs_root, str(out))
    sub = report_subdir(paper, scale)
    reproduce = reproduce_command(paper, scale, runs_root)
    base = Section(paper, claims.title, scale, (sub / "report.html").as_posix(), command, reproduce)
    try:
        _, runs, notes, off = select_runs(found, paper, scale, runs_root)
    except UserError as err:
        return replace(base, refused=str(err))
    results, figures = render_parts(
        claims, runs, scale, out / sub, command=command, notes=notes, off=off, runs_root=runs_root
    )
    seeds = ", ".join(map(str, seeds_of(runs)))
    count = len(every_run(runs))
    return replace(base, results=results, figures=figures, seeds=seeds, runs=count)


def collect_runs(
    found: Sequence[Run], runs_root: str, out: Path, claims_dir: Path, command: str = ""
) -> Index:
    """Write every paper's report for the runs `found` (read from `runs_root`) under `out`
    (each in its `report_subdir`) and return what the index shows."""
    not_run: list[NotRun] = []
    groups = {run.group for run in found}
    # every claims file (and the record of its terms) is checked before any page is written,
    # so that a mistake in one stops the command with no other paper's pages half-written
    to_write = []
    for paper in known_papers(claims_dir):
        claims = load_claims(paper, claims_dir)
        # the largest scale, the nearest the paper's, first; a tiny set is a quick look
        scales = [scale for scale in reversed(SCALES) if f"{paper}_{scale}" in groups]
        for scale in scales:
            check_caps_for_scale(claims, scale, claims_dir / f"{paper}.yaml")
            held = {run.path.parent for run in found if run.group == f"{paper}_{scale}"}
            for folder in held:
                moved(claims.claims, folder)  # a damaged record of its terms: one line
        if not scales:
            how = reproduce_command(paper, "small", runs_root)
            not_run.append(NotRun(paper, claims.title, how))
        to_write += [(claims, scale) for scale in scales]
    sections = [_section(claims, scale, found, runs_root, out) for claims, scale in to_write]
    return Index(sections, not_run, runs_root, command)
