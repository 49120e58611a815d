"""The content of one paper's report page: setup, claims and final-metrics tables.

Every report states the scale, data set, model, worker count, network model, seeds and the
clocks, so that a number in the claims table can be read against the setup that produced it.
The claims table gives each outcome claim's criterion (its band and the band's reason, or its
direction rule), our mean over seeds with its 95% interval, each seed's value, and the
verdict (`repro.report.seeds`); the model checks, which test our implementation against the
paper's formulas rather than reproduce a result, have a table of their own and are not
counted. The final-metrics table has one row per run and seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from repro.report.choices import choices_table
from repro.report.claims import ClaimsFile
from repro.report.findings import findings_table
from repro.report.render import FigureOut, Page, Table, fmt
from repro.report.seeds import VERDICTS_TEXT, ClaimResult, model_checks, outcomes, summary
from repro.report.series import Run, Seeded, cfg, every_run, points, seeds_of
from repro.sweep.tuned import tuning_table

CHECKS_TITLE = "Checks of the implementation against the paper's formulas (not counted as claims)"

CLOCKS_TEXT = (
    "modeled: each worker's compute time (measured or sampled, compute.mode) plus every "
    "collective's alpha-beta cost on the modeled network, a collective waiting for the slowest "
    "worker (time/modeled_s); wall: measured on this machine (time/wall_s)"
)


def _distinct(runs: Seeded, get: Callable[[Run], Any]) -> str:
    values: list[str] = []
    for _, _, run in every_run(runs):
        text = fmt(get(run))
        if text not in values:
            values.append(text)
    return ", ".join(values)


def _network(run: Run) -> str:
    net = cfg(run, "network", {}) or {}
    text = (
        f"{net.get('name', '?')}: latency {fmt(net.get('latency_ms'))} ms, bandwidth "
        f"{fmt(net.get('bandwidth_gbps'))} Gbit/s, bytes x{fmt(net.get('bytes_scale', 1.0))}"
    )
    return text + (" (changes over time: schedule)" if net.get("schedule") else "")


def _compute(run: Run) -> str:
    c = cfg(run, "compute", {}) or {}
    if c.get("mode", "measured") == "measured":
        return "measured on this machine"
    text = f"sampled {c.get('dist', '?')}, mean {fmt(c.get('mean_ms'))} ms"
    if c.get("shift_ms"):
        text += f", shift {fmt(c['shift_ms'])} ms"
    if c.get("straggler_prob"):
        text += f", stragglers p={fmt(c['straggler_prob'])} x{fmt(c.get('straggler_factor'))}"
    return text


def _workload(run: Run) -> str:
    name = cfg(run, "workload.name")
    extra = [str(cfg(run, f"workload.{k}")) for k in ("dataset", "model")]
    extra = [e for e in extra if e != "None"]
    return f"{name} ({', '.join(extra)})" if extra else str(name)


def _optimizer(run: Run) -> str:
    return f"{cfg(run, 'optim.name')}, lr {fmt(cfg(run, 'optim.lr'))}"


def setup_table(runs: Seeded, scale: str) -> Table:
    rows = [
        ["scale", scale],
        ["run group", _distinct(runs, lambda r: r.group)],
        ["data set / model", _distinct(runs, _workload)],
        ["workers", _distinct(runs, lambda r: cfg(r, "trainer.world_size"))],
        ["batch per worker", _distinct(runs, lambda r: cfg(r, "trainer.batch_size"))],
        ["steps", _distinct(runs, lambda r: cfg(r, "trainer.steps"))],
        ["network model", _distinct(runs, _network)],
        ["compute model", _distinct(runs, _compute)],
        ["optimizer", _distinct(runs, _optimizer)],
        ["seeds", f"{len(seeds_of(runs))} ({', '.join(map(str, seeds_of(runs)))})"],
        ["clocks", CLOCKS_TEXT],
    ]
    return Table("Setup", ["", "value"], rows)


def with_unit(value: Any, unit: str) -> str:
    text = fmt(value)
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    return f"{text} {unit}" if numeric and unit and text != "never reached" else text


def claims_table(results: list[ClaimResult], scale: str, title: str = "Claims") -> Table:
    rows = [
        [
            r.claim.id,
            r.claim.statement,
            r.claim.source,
            with_unit(r.claim.published, r.claim.unit),
            r.claim.criterion(),
            r.ours_text(r.claim.unit),
            r.per_seed_text(),
            r.verdict_text(),
            scale,
            r.note,
        ]
        for r in results
    ]
    headers = [
        "claim",
        "statement",
        "source",
        "published",
        "criterion",
        "ours (mean over seeds, 95% CI)" if title == "Claims" else "ours (mean over seeds)",
        "per seed",
        "verdict",
        "scale",
        "how",
    ]
    return Table(title, headers, rows, verdict_col=7)


def _last(run: Run, metric: str) -> Any:
    ys = points(run, metric)[1]
    return ys[-1] if ys else None


def _status(exit_code: int | None) -> str:
    if exit_code is None:
        return "incomplete (no exit record)"
    return "finished" if exit_code == 0 else f"failed (exit {exit_code})"


def metrics_table(runs: Seeded, name: Callable[[str], str]) -> Table:
    rows = []
    for label, seed, run in every_run(runs):
        sent = _last(run, "comm/bytes")
        rows.append(
            [
                name(label),
                label,
                str(seed),
                fmt(_last(run, "step")),
                fmt(_last(run, "train/loss")),
                fmt(_last(run, "test/acc")),
                fmt(_last(run, "time/modeled_s")),
                fmt(_last(run, "time/wall_s")),
                fmt(None if sent is None else sent / 1e6),
                _status(run.exit_code),
                str(run.run_id),
            ]
        )
    headers = [
        "method",
        "label",
        "seed",
        "steps",
        "final train loss",
        "test acc",
        "modeled time (s)",
        "wall time (s)",
        "payload sent (MB)",
        "status",
        "run id",
    ]
    return Table("Final metrics per run and seed (last logged point)", headers, rows)


def assemble(
    claims: ClaimsFile,
    runs: Seeded,
    scale: str,
    results: list[ClaimResult],
    figures: list[FigureOut],
    notes: list[str],
) -> Page:
    seeds = len(seeds_of(runs))
    tuned = any(cfg(run, "experiment.tuned", False) for _, _, run in every_run(runs))
    tuning = tuning_table(claims.paper, scale) if tuned else None
    why = findings_table(claims.findings, results, scale, runs)
    checks = model_checks(results)
    lines = [
        claims.citation,
        f"Scale: {scale}. Seeds: {seeds}. Claims: {summary(results)}.",
        f"Verdicts: {VERDICTS_TEXT}.",
        tuning.summary
        if tuning
        else "Learning rates: set by hand per run (experiment.tuned is false).",
    ]
    return Page(
        title=f"Reproduction report: {claims.title}",
        lines=lines,
        tables_before=[
            setup_table(runs, scale),
            *([choices_table(claims.choices)] if claims.choices else []),
            *([Table(tuning.title, tuning.headers, tuning.rows)] if tuning else []),
            claims_table(outcomes(results), scale),
            *([why] if why.rows else []),
            *([claims_table(checks, scale, CHECKS_TITLE)] if checks else []),
        ],
        figures=figures,
        tables_after=[metrics_table(runs, claims.display_name)],
        notes=notes,
    )
