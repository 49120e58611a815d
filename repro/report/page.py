"""The content of one paper's report page, in the order a reader needs it.

The page opens with what reproduced: the summary table (`repro.report.summary`), the rule
that turns intervals into verdicts, the runs the page lacks with the command that makes them
(`repro.report.missing_runs`), and the figure that shows the headline claim. Then how the
numbers were made (the setup, the stated choices and deviations, the tuning); then the
detailed claims table with the runs each claim read, the analysis of claims that did not
reproduce, the model checks (not counted), the published tables beside ours, the other
figures, and one row per run and seed.

A run id links to the run's directory (its config.yaml, summary.json, checkpoints and wandb
log), by a path relative to the page, so a page and the runs tree it was built from can be
moved together; and to the run's wandb page when its summary records one (a run tracked
online, or synced later). A claim's row links every run it read: the labels its calculator
reads (`repro.claims.reads`) at the seeds it was judged on (`repro.claims.verdicts`), and names
the labels it reads that have no run.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from repro.claims.choices import choices_table
from repro.claims.claims_file import ClaimsFile
from repro.claims.findings import findings_table
from repro.claims.published import render_table
from repro.claims.result import ClaimResult
from repro.claims.verdicts import VERDICTS_TEXT, OffSet, model_checks, outcomes
from repro.pages.writer import (
    Block,
    Cell,
    FigureOut,
    Heading,
    Link,
    Page,
    Para,
    Table,
    counted,
    fmt,
)
from repro.report.missing_runs import missing_notes, needed_missing, off_set_notes, unfinished_notes
from repro.report.run_setup import (
    ENVIRONMENT_ROWS,
    by_arm,
    compute,
    data_text,
    environment_notes,
    learning_rate,
    network,
    optimizer,
    recorded,
    stopping_text,
    workload,
)
from repro.report.summary import anchor, claim_reads, claims_counts, summary_table, with_unit
from repro.sweep.tuned import TuningTable, tuning_table
from repro.track.runs import STOPPED
from repro.track.series import Run, Seeded, cfg, every_run, last_logged, seeds_of

# the summary key under which a run's wandb page is recorded
WANDB_URL = "wandb_url"


def run_href(run: Run, page_dir: Path) -> str:
    """The run's directory relative to the page's, ending in '/'."""
    path = os.path.relpath(run.path.absolute(), Path(page_dir).absolute())
    return Path(path).as_posix() + "/"


def wandb_url(run: Run) -> str | None:
    url = run.summary.get(WANDB_URL)
    return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None


def run_cell(run: Run, page_dir: Path) -> Cell:
    """The run id, linked to its directory, and to its wandb page when it has one."""
    link = Link(str(run.run_id), run_href(run, page_dir))
    url = wandb_url(run)
    return (link, " (", Link("wandb", url), ")") if url else link


def reads_cell(labels: list[str], seeds: list[int], runs: Seeded, page_dir: Path) -> Cell:
    """Each label and its seeds ("sync: seeds 0, 1, 2"), each seed linked to that run's
    directory; a label with no run at those seeds is named as such."""
    parts: list[Cell] = []
    for label in labels:
        if parts:
            parts.append("; ")
        by_seed = runs.get(label, {})
        present = [seed for seed in seeds if seed in by_seed]
        if not present:
            parts.append(f"{label} (no run)")
            continue
        parts.append(f"{label}: seed{'s' if len(present) > 1 else ''} ")
        for i, seed in enumerate(present):
            parts += [", "] if i else []
            parts.append(Link(str(seed), run_href(by_seed[seed], page_dir)))
    return tuple(parts) if parts else "—"


CHECKS_TITLE = "Checks of the implementation against the paper's formulas (not counted as claims)"
HAND_SET = "Learning rates: set by hand per run (experiment.tuned is false)."

# the metrics table's columns of a run's last logged value: header -> metric
LAST_COLUMNS = {
    "steps": "step",
    "final train loss": "train/loss",
    "test acc": "test/acc",
    "modeled time (s)": "time/modeled_s",
    "wall time (s)": "time/wall_s",
}

CLOCKS_TEXT = (
    "modeled: each worker's compute time (measured or sampled, compute.mode) plus every "
    "collective's alpha-beta cost on the modeled network, a collective waiting for the slowest "
    "worker (time/modeled_s); wall: measured on this machine (time/wall_s)"
)


def run_set_tuning(paper: str, scale: str, runs: Seeded) -> TuningTable | None:
    """The report's statement of the search that tuned the runs; None when they are not tuned."""
    tuned = any(cfg(run, "experiment.tuned", False) for _, _, run in every_run(runs))
    return tuning_table(paper, scale) if tuned else None


def setup_table(runs: Seeded, scale: str) -> Table:
    """The setup; a setting the arms do not share names each arm's value."""
    rows = [
        ["scale", scale],
        ["run group", by_arm(runs, lambda r: r.group)],
        ["data set / model", by_arm(runs, workload)],
        ["workers", by_arm(runs, lambda r: cfg(r, "trainer.world_size"))],
        ["batch per worker", by_arm(runs, lambda r: cfg(r, "trainer.batch_size"))],
        ["stopping rule", stopping_text(runs)],
        ["network model", by_arm(runs, network)],
        ["compute model", by_arm(runs, compute)],
        ["optimizer", by_arm(runs, optimizer)],
        ["learning rate", by_arm(runs, learning_rate)],
        ["seeds", f"{len(seeds_of(runs))} ({', '.join(map(str, seeds_of(runs)))})"],
        ["clocks", CLOCKS_TEXT],
        *[[title, by_arm(runs, recorded(key))] for key, title in ENVIRONMENT_ROWS.items()],
        ["data read (digest)", data_text(runs)],
    ]
    return Table("Setup", ["", "value"], rows, css="keyvalue")


def claims_table(
    results: list[ClaimResult],
    scale: str,
    reads: Callable[[ClaimResult], Cell],
    title: str = "Claims",
) -> Table:
    """Every claim below the summary that states it: its criterion, each seed's value, how it
    was computed and the runs it read (`reads`), in rows the summary links to."""
    ours = "ours (mean over seeds, 95% CI)" if title == "Claims" else "ours (mean over seeds)"
    columns: list[tuple[str, Callable[[ClaimResult], Cell]]] = [
        ("claim", lambda r: r.claim.id),
        ("source", lambda r: r.claim.source),
        ("published", lambda r: with_unit(r.claim.published, r.claim.unit)),
        ("criterion", lambda r: r.claim.criterion()),
        (ours, lambda r: r.ours_text(r.claim.unit)),
        ("per seed", lambda r: r.per_seed_text()),
        ("verdict", lambda r: r.verdict_text()),
        ("scale", lambda r: scale),
        ("how", lambda r: r.note),
        ("runs read", reads),
    ]
    rows = [[get(r) for _, get in columns] for r in results]
    headers = [header for header, _ in columns]
    ids = [anchor(r.claim.id) for r in results]
    return Table(title, headers, rows, headers.index("verdict"), ids)


def _status(exit_code: int | None) -> str:
    if exit_code is None:
        return "incomplete (no exit record)"
    if exit_code == STOPPED:
        return "stopped (Ctrl-C or kill; the same command resumes it)"
    return "finished" if exit_code == 0 else f"failed (exit {exit_code})"


def metrics_table(runs: Seeded, name: Callable[[str], str], page_dir: Path | None = None) -> Table:
    """One row per run and seed; with `page_dir`, each run id links to its directory."""
    rows = []
    for label, seed, run in every_run(runs):
        last = [fmt(last_logged(run, metric)) for metric in LAST_COLUMNS.values()]
        sent = last_logged(run, "comm/bytes")
        mb = fmt(None if sent is None else sent / 1e6)
        link = run_cell(run, page_dir) if page_dir is not None else str(run.run_id)
        status = _status(run.exit_code)
        rows.append([name(label), label, str(seed), *last, mb, status, recorded("data")(run), link])
    headers = [
        *["method", "label", "seed", *LAST_COLUMNS],
        *["payload sent (MB)", "status", "data read (digest)", "run id"],
    ]
    return Table("Final metrics per run and seed (last logged point)", headers, rows)


def seed_counts(runs: Seeded) -> str:
    """How many seeds the runs have: one number where every label has as many, else each
    count with how many labels have it ("3 for 8 labels, 10 for 2"), since added seeds go
    only to the runs an undecided claim reads and one number would overstate the rest."""
    per_label = [len(by_seed) for by_seed in runs.values()]
    if len(set(per_label)) <= 1:
        return str(len(seeds_of(runs)))
    (c, n), *rest = sorted(Counter(per_label).items())
    first = f"{c} for {counted(n, 'label')}"
    return ", ".join([first, *(f"{c} for {n}" for c, n in rest)])


def assemble(
    claims: ClaimsFile,
    runs: Seeded,
    scale: str,
    results: list[ClaimResult],
    figures: list[FigureOut],
    notes: list[str],
    page_dir: Path,
    off: OffSet | None = None,
    runs_root: str = "runs",
) -> Page:
    """The page of one reproduction (see module doc); run links are relative to `page_dir`;
    `off` the runs that are not the run set's (`repro.report.build.Selection.off`); the
    commands it gives make runs under `runs_root`, where the report read its runs."""
    tuning = run_set_tuning(claims.paper, scale, runs)
    why = findings_table(claims.findings, results, scale, runs)
    checks = model_checks(results)
    needs = needed_missing(claims, runs, results, scale)
    missing = missing_notes(claims.paper, scale, needs, runs_root=runs_root)
    missing += unfinished_notes(claims.paper, scale, runs, runs_root=runs_root)
    missing += off_set_notes(claims.paper, scale, off or {}, runs_root)
    missing += environment_notes(runs)

    def reads(result: ClaimResult) -> Cell:
        return reads_cell(*claim_reads(result, runs), runs, page_dir)

    counts = f"Scale: {scale}. Seeds: {seed_counts(runs)}. Claims: {claims_counts(results)}."
    headline = [f for f in figures if f.headline]
    blocks: list[Block] = [
        Para(claims.citation, "lead"),
        Para(counts, "lead"),
        summary_table(results, scale),
        Para(f"How verdicts are given: {VERDICTS_TEXT}.", "rule"),
        *missing,
        *headline,
        Para(tuning.summary if tuning else HAND_SET),
        setup_table(runs, scale),
        *filter(None, [choices_table(claims.choices, scale)]),
        *([Table(tuning.title, tuning.headers, tuning.rows)] if tuning else []),
        claims_table(outcomes(results), scale, reads),
        *([why] if why.rows else []),
        *([claims_table(checks, scale, reads, CHECKS_TITLE)] if checks else []),
        *[render_table(spec, runs, claims.display_name) for spec in claims.tables],
    ]
    rest = [f for f in figures if not f.headline]
    if rest:
        blocks += [Heading("Figures"), *rest]
    blocks.append(metrics_table(runs, claims.display_name, page_dir))
    captions = [f"{spec.title}: {spec.caption}" for spec in claims.tables if spec.caption]
    return Page(f"Reproduction report: {claims.title}", blocks, [*captions, *notes])
