"""Report figures: the file each of a claims file's `figures:` becomes.

A `FigureSpec` (`repro.claims.figure_specs`) says what to draw; `draw_figure` reads the runs
(label -> seed -> run) and writes the file, SVG (or PNG at twice the screen resolution when
the path ends in .png). Kinds: `curves` and `steps`, a metric along training (`curve_plots`);
`points` and `drops`, one number per run against a run setting (`point_plots`). Here is what
they share: axis words, captions, references resolved against runs, and panels, which split
a figure into small multiples with one y axis (one per method family, where one axis would
hold more lines than a reader can follow), `baseline` repeating one run in every panel.
Colours and line styles come from `colours` (keyed by run label), so a method looks the same
in every report; the layout, legends and reference lines from `canvas`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING

from repro.claims.figure_specs import FigureSpec
from repro.track.runs import cut_short
from repro.track.series import Run, Seeded, cfg, every_run, points, trailing_mean, x_metric

if TYPE_CHECKING:
    from matplotlib.figure import Figure

AXIS_LABELS = {
    "step": "step (optimizer steps)",
    "time/modeled_s": "modeled time (s)",
    "time/wall_s": "wall-clock time (s)",
    "train/loss": "training loss (cross-entropy)",
    "test/loss": "test loss (cross-entropy)",
    "test/acc": "test accuracy (fraction)",
    "method/tau": "communication period tau (local steps)",
    "method/cr": "compression ratio c (fraction kept)",
    "method.cr": "compression ratio c (fraction kept)",
    "method/collective": "collective",
    "method/gain": "compression gain",
    "comm/bytes": "payload sent (cumulative, bytes)",
    "lr": "learning rate",
    "epoch": "epoch (passes over the training set)",
    "samples": "samples processed (all workers)",
    "comm/collectives": "collectives issued (cumulative count)",
    "comm/measured_s": "measured communication time (cumulative, s)",
    "throughput/samples_per_s": "throughput (samples/s, wall clock)",
    "throughput/modeled_samples_per_s": "throughput (samples/s, modeled clock)",
    "throughput/run_modeled_samples_per_s": "throughput over the run (samples/s, modeled clock)",
    "effective_batch": "effective batch (workers x batch per worker)",
    "sends_per_parameter": "c x steps (times each parameter is sent, on average)",
}

CLOCK_SENTENCES = {
    "time/modeled_s": "x axis: modeled clock (sampled compute times plus the alpha-beta "
    "network model), seconds.",
    "time/wall_s": "x axis: measured wall clock on this machine, seconds.",
    "step": "x axis: optimizer steps (no clock).",
    "sends_per_parameter": "x axis: c x steps, the fraction kept times the steps (no clock).",
}


LOSSES = {"classification": "cross-entropy", "regression": "mean squared error"}
"""The loss of each `workload.task`, as `repro.workload.workload` computes it."""


def tasks_of(runs: Iterable[Run]) -> list[str]:
    """Each run's `workload.task` (runs recorded before it was a setting classified)."""
    return [cfg(run, "workload.task", "classification") for run in runs]


def axis_label(name: str, tasks: Iterable[str] = ()) -> str:
    """The words on an axis for a metric; a loss names the loss of the `tasks` drawn (Adasum's
    toy problem is a regression beside classification runs), cross-entropy by default."""
    if name in ("train/loss", "test/loss") and tasks:
        losses = " or ".join(LOSSES[task] for task in sorted(set(tasks)))
        return f"{'training' if name == 'train/loss' else 'test'} loss ({losses})"
    return AXIS_LABELS.get(name, name)


def clock_sentence(spec: FigureSpec) -> str:
    """Which clock the figure's x axis uses, for the caption."""
    if spec.kind in ("points", "drops") and spec.x != "sends_per_parameter":
        return f"x axis: run setting '{spec.x}'."
    return CLOCK_SENTENCES.get(x_metric(spec.x), f"x axis: '{x_metric(spec.x)}'.")


Namer = Callable[[str], str]


def resolve_reference(ref: dict, spec: FigureSpec, runs: Seeded) -> dict | None:
    """`ref` with x_times / y_times turned into numbers from its run's last logged point (the
    mean over its seeds; y smoothed by the figure's `smooth`, as the claims read a final
    value); None when that run is absent or logged nothing on this figure's axes."""
    if "run" not in ref:
        return ref
    lasts = []
    for run in runs.get(ref["run"], {}).values():
        xs, ys = points(run, spec.y, spec.x)
        if ys and not any(isinstance(y, str) for y in ys):
            lasts.append((xs[-1], trailing_mean([float(y) for y in ys], spec.smooth)[-1]))
    if not lasts:
        return None
    out = {k: v for k, v in ref.items() if k in ("x", "y", "label", "role", "cross", "interpolate")}
    if "x_times" in ref:
        out["x"] = ref["x_times"] * sum(x for x, _ in lasts) / len(lasts)
    if "y_times" in ref:
        out["y"] = ref["y_times"] * sum(y for _, y in lasts) / len(lasts)
    return out


def panel_groups(spec: FigureSpec, labels: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(title, labels) of each panel that holds runs: those whose label matches the panel's
    regex (each label in the first panel it matches), the baseline left out (it is drawn in
    every panel), leftovers in a last panel "other runs". Without panels (or without a run
    in any): one untitled panel with every label."""
    if not spec.panels:
        return [("", list(labels))]
    left = [label for label in labels if label != spec.baseline]
    groups = []
    for panel in spec.panels:
        members = [label for label in left if re.fullmatch(panel["runs"], label)]
        left = [label for label in left if label not in members]
        if members:
            groups.append((panel["title"], members))
    if left:
        groups.append(("other runs", left))
    return groups or [("", [])]  # no run but the baseline: it still gets its axes


def shown_everywhere(spec: FigureSpec, runs: Seeded) -> list[str]:
    """The baseline, where a curves or steps figure with panels draws it in every panel."""
    shown = spec.kind in ("curves", "steps") and spec.panels and spec.baseline in runs
    return [spec.baseline] if shown else []


def drop_labels(spec: FigureSpec, labels: Sequence[str], family: str) -> list[str]:
    """The labels of a `drops` figure's series `family`: its prefix, the reference aside."""
    reference = spec.measure["reference"]  # FigureSpec requires it of `drops`
    return [label for label in labels if label.startswith(family) and label != reference]


def drawn_seeds(spec: FigureSpec, runs: Seeded) -> dict[str, list[int]]:
    """label -> the seeds the figure draws of it; for `drops` the seeds its reference also
    has (a drop needs both)."""
    selected = spec.selected(list(runs))
    if spec.kind == "drops":
        reference = runs.get(spec.measure["reference"], {})
        return {
            label: sorted(set(runs[label]) & set(reference))
            for family in spec.series
            for label in drop_labels(spec, selected, family)
        }
    drawn = [label for _, members in panel_groups(spec, selected) for label in members]
    return {label: sorted(runs[label]) for label in shown_everywhere(spec, runs) + drawn}


def seeds_sentence(spec: FigureSpec, runs: Seeded, name: Namer) -> str:
    """How the figure shows the seeds, for the caption: the seeds of the runs it draws,
    and, where runs differ (a method given more seeds for its claim), each run's seeds: the
    runs grouped by their seeds, most seeds first, the commonest set last as "the others"."""
    by_label = drawn_seeds(spec, runs)
    seeds = sorted({seed for got in by_label.values() for seed in got})
    if len(seeds) <= 1:
        return f"One seed ({seed_ranges(seeds) or 'none'})."
    groups: dict[tuple[int, ...], list[str]] = {}
    for label, got in by_label.items():
        groups.setdefault(tuple(got), []).append(name(label))
    head = f"{len(seeds)} seeds ({seed_ranges(seeds)})"
    if len(groups) > 1:
        usual = max(groups, key=lambda got: len(groups[got]))
        parts = [
            f"{seed_ranges(got) or 'none'} for {_and(names)}"
            for got, names in sorted(groups.items(), key=lambda g: (-len(g[0]), g[0]))
            if got != usual
        ]
        rest = _and(groups[usual]) if len(groups[usual]) == 1 else "the others"
        head += f"; seeds {'; '.join(parts)}; {seed_ranges(usual) or 'none'} for {rest}"
    if spec.kind in ("points", "drops"):
        return (
            f"{head}: a small dot per seed; the line joins the means "
            "over the seeds and the shaded band spans the lowest to the highest seed (no "
            "mean where a seed never got there)."
        )
    if spec.kind == "steps":
        return f"{head}: one thin line per seed in the method's colour."
    unfinished = [
        f"{label} seed {seed}"
        for label, seed, run in every_run(runs)
        if label in by_label and not finished(run)
    ]
    return (
        f"{head}: faint lines are the seeds; the thick line is their "
        "mean and the shaded band spans the lowest to the highest seed, both on the union of "
        "the seeds' logged x values (each seed linearly interpolated between its points) as "
        "far as every seed has logged."
    ) + (
        f" Unfinished (stopped, or no exit record), drawn dashed and left out of the mean: "
        f"{', '.join(unfinished)}."
        if unfinished
        else ""
    )


def seed_ranges(seeds: list[int] | tuple[int, ...]) -> str:
    """Sorted seeds with each run of three or more consecutive ones as a range: 0-4, 7, 8."""
    out: list[str] = []
    for _, pairs in groupby(enumerate(seeds), lambda pair: pair[1] - pair[0]):
        run = [seed for _, seed in pairs]
        out += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else map(str, run)
    return ", ".join(out)


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def finished(run: Run) -> bool:
    """Whether the run ran to its end: one still running, killed (no exit record) or stopped
    by Ctrl-C or kill stops short of its horizon, and no claim reads it (`cut_short`)."""
    return cut_short(run.exit_code) is None


def render(spec: FigureSpec, runs: Seeded, name: Namer) -> Figure:
    """The figure of `spec` over runs (label -> seed -> run); NotMeasurable when nothing to
    draw."""
    if spec.kind in ("points", "drops"):
        from repro.report import point_plots  # loads matplotlib only when a figure is drawn

        return point_plots.render(spec, runs, name)
    from repro.report import curve_plots

    return curve_plots.render(spec, runs, name)


def draw_figure(spec: FigureSpec, runs: Seeded, name: Namer, path: Path) -> Path:
    """Draw `spec` into `path` (.svg, or .png at twice the screen resolution); NotMeasurable
    when nothing to draw."""
    from repro.report.canvas import save

    return save(render(spec, runs, name), Path(path))
