"""A paper's reproduction as the spec (plain JSON) of a W&B Report.

The Report says what the local report says, over the reproduction's run group
(`<paper>_<scale>`) on the server, in the order a reader asks: the page's summary table
(`repro.report.summary`), why claims did not reproduce, the curves, the choices and
deviations from the paper, how the learning rates were tuned, the setup, and the checks of
our implementation against the paper's formulas.

Curves: one panel grid per curve or step figure of the claims file (the headline figure
first), over that figure's runs only, grouped by run label (`experiment.label`), so wandb
draws each method's mean over its seeds with a band from the lowest to the highest seed, in
the local reports' colour for that method (`colours.colour_for`). wandb's line plots have no
reference lines, so a figure's reference lines (a target, the paper's number) are stated in
a text panel beside its plot, with the value the local figure draws them at. Then each
plotted metric against both the modeled clock and steps. Figures of one number per run
(`points`, `drops`) have no wandb panel; the Report names them.

The spec is what `repro report PAPER --publish` saves beside the local report
(`wandb_report.json`), so that a Report built offline can be published later with
`repro report publish PATH`: it holds text, tables as Markdown, and panels as plain data,
and needs no server to build. It is written here, beside the pages, from the same tables;
the tracker turns it into a Report and saves it (`repro.track.wandb_report`,
`repro.track.wandb_publish`), reading nothing of the report package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from repro.claims.choices import choices_table
from repro.claims.claims_file import ClaimsFile, load_claims
from repro.claims.figure_specs import FigureSpec
from repro.claims.findings import findings_table
from repro.claims.fixed_terms import moved_for
from repro.claims.result import ClaimResult
from repro.claims.set_regime import set_settings
from repro.claims.verdicts import VERDICTS_TEXT, evaluate, model_checks, summary
from repro.pages.writer import Table, counted, fmt, markdown_table
from repro.report.build import ordered, select_runs
from repro.report.colours import colour_for
from repro.report.page import CHECKS_TITLE, CLOCKS_TEXT, HAND_SET, run_set_tuning, setup_table
from repro.report.plots import axis_label, resolve_reference
from repro.report.summary import summary_table
from repro.track.runs import find_runs
from repro.track.series import Seeded, cfg, every_run, seeds_of, x_metric
from repro.track.wandb_publish import publish_spec
from repro.track.wandb_report import SPEC_FORMAT

TITLE_MAX = 128  # wandb refuses longer report titles
BOTH_CLOCKS = ("time/modeled_s", "step")
CURVES_TEXT = (
    "Each line is one run of the set: the mean over its seeds, with a band from the lowest "
    "to the highest seed (runs grouped by experiment.label). Clocks: "
)


def _markdown(table: Table) -> dict:
    return {"kind": "markdown", "text": "\n".join(markdown_table(table)).strip()}


def reference_text(ref: Mapping[str, Any], x: str, y: str) -> str:
    """A resolved reference line or marker (`plots.resolve_reference`) in words."""
    at = [f"{axis_label(name)} = {fmt(ref[k])}" for k, name in (("x", x), ("y", y)) if k in ref]
    return f"{ref.get('label', 'published')}: at {' and '.join(at)}"


def _line(
    title: str, x: str, y: str, *, logx=False, logy=False, xlabel="", ylabel=""
) -> dict[str, Any]:
    return {
        "title": title,
        "x": x,
        "y": y,
        "log_x": bool(logx),
        "log_y": bool(logy),
        "title_x": xlabel or axis_label(x),
        "title_y": ylabel or axis_label(y),
    }


def _grid(title: str, group: str, runs: Seeded, labels: Sequence[str], lines: list) -> dict:
    """A panel grid over `labels`' runs (every seed), grouped by label. The runs are named by
    id: the ones the local report read, not an older run of the group left on the server."""
    return {
        "kind": "panels",
        "title": title,
        "group": group,
        "run_ids": [run.run_id for label in labels for run in runs[label].values()],
        "colours": {label: colour_for(label) for label in labels},
        "lines": lines,
        "references": [],
    }


def figure_grids(figures: Sequence[FigureSpec], runs: Seeded, group: str) -> list[dict]:
    """One grid per curve or step figure (the headline first), then one of every plotted
    metric against both clocks where no figure already plots it so."""
    curves = sorted(
        (f for f in figures if f.kind in ("curves", "steps")), key=lambda f: not f.headline
    )
    out, seen = [], set()
    for f in curves:
        x = x_metric(f.x)
        labels = f.selected(list(runs))
        if not labels:
            continue
        line = _line(f.title, x, f.y, logx=f.logx, logy=f.logy, xlabel=f.xlabel, ylabel=f.ylabel)
        grid = _grid(f.title, group, runs, labels, [line])
        resolved = [resolve_reference(ref, f, runs) for ref in f.reference]
        grid["references"] = [reference_text(r, x, f.y) for r in resolved if r is not None]
        out.append(grid)
        seen.add((x, f.y))
    logy = {f.y: f.logy for f in curves}
    lines = [
        _line(f"{axis_label(y)} against {axis_label(x)}", x, y, logy=logy[y])
        for y in logy
        for x in BOTH_CLOCKS
        if (x, y) not in seen
    ]
    if lines:
        out.append(_grid("Every curve against both clocks", group, runs, list(runs), lines))
    return out


def build_spec(
    claims: ClaimsFile,
    runs: Seeded,
    results: list[ClaimResult],
    scale: str,
    *,
    project: str,
    entity: str | None,
) -> dict[str, Any]:
    """The Report of one reproduction as plain data (see module doc); `entity` None: the
    publishing key's default entity."""
    group = f"{claims.paper}_{scale}"
    title = f"Reproduction: {claims.title}"
    seeds = seeds_of(runs)
    lead = (
        f"{claims.citation} Scale: {scale}; wandb run group {group}; "
        f"{counted(len(seeds), 'seed')} "
        f"({', '.join(map(str, seeds))}). Claims: {summary(results)}."
    )
    blocks: list[dict] = [
        {"kind": "p", "text": lead},
        _markdown(summary_table(results)),
        {"kind": "p", "text": f"Verdicts: {VERDICTS_TEXT}."},
    ]
    why = findings_table(claims.findings, results, scale, runs)
    if why.rows:
        blocks.append(_markdown(why))
    blocks += [
        {"kind": "h2", "text": "Curves"},
        {"kind": "p", "text": CURVES_TEXT + CLOCKS_TEXT + "."},
        *figure_grids(claims.figures, runs, group),
    ]
    local_only = [f.title for f in claims.figures if f.kind not in ("curves", "steps")]
    if local_only:
        note = "In the local report only (one number per run): " + "; ".join(local_only)
        blocks.append({"kind": "p", "text": note})
    choices = choices_table(claims.choices, scale)
    if choices is not None:
        blocks.append(_markdown(choices))
    tuning = run_set_tuning(claims.paper, scale, runs)
    if tuning is None:
        blocks.append({"kind": "p", "text": HAND_SET})
    else:
        blocks.append(_markdown(Table(tuning.title, tuning.headers, tuning.rows)))
        blocks.append({"kind": "p", "text": tuning.summary})
    blocks.append(_markdown(setup_table(runs, scale)))
    if checks := model_checks(results):
        rows = [
            [r.claim.id, r.claim.criterion(), r.ours_text(r.claim.unit), r.per_seed_text()]
            for r in checks
        ]
        headers = ["claim", "criterion", "ours (mean)", "per seed"]
        blocks.append(_markdown(Table(CHECKS_TITLE, headers, rows)))
    return {
        "format": SPEC_FORMAT,
        "paper": claims.paper,
        "scale": scale,
        "project": project,
        "entity": entity,
        "title": title if len(title) <= TITLE_MAX else title[: TITLE_MAX - 1] + "…",
        "description": f"{claims.paper} at scale {scale}: published claims against our runs",
        "blocks": blocks,
    }


def publish(paper: str, runs_root: Path, scale: str | None, claims_dir: Path, out_dir: Path) -> str:
    """Save the spec of `paper`'s Report in `out_dir` and publish it when a key and a server
    exist (`repro report PAPER --publish`); the one line that says which happened."""
    claims = load_claims(paper, claims_dir)
    chosen, runs, _, off = select_runs(find_runs(runs_root), paper, scale, str(runs_root))
    runs = ordered(claims, runs)
    first = every_run(runs)[0][2]
    project = cfg(first, "tracking.project") or "repro"
    entity = cfg(first, "tracking.entity") or None
    made = set_settings(f"{paper}_{chosen}")
    results = evaluate(claims.claims, runs, chosen, off, made, moved_for(claims.claims, runs))
    spec = build_spec(claims, runs, results, chosen, project=project, entity=entity)
    return publish_spec(spec, out_dir)
