"""`repro report compare RUN_OR_GROUP ...`: one metric of any runs, overlaid.

Each argument is a run directory (or a directory of runs, or a `.wandb` file), a run id, or
a run group under `--runs` (every run of that group: a reproduction, a sweep). This puts,
for example, a sweep's Pareto points beside a paper's runs. The figure (`compare.png`) and
a page (`compare.html`, written by the reports' page writer) with a table of each run's last
point go into `--out`.

A run's colour is its method's colour in the reports (by label), so a method looks the same
here; when the runs come from several groups, each group gets its own line style and the
legend says which group a run belongs to; runs of one method and group that differ in their
settings (a `--multirun`) get a marker each and are named by those settings.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from repro.claims.claims_file import load_claims
from repro.config import NON_IDENTITY_KEYS, flat
from repro.errors import CommandParser, UserError
from repro.pages.writer import Cell, Code, FigureOut, Page, Para, Table, counted, fmt, to_html
from repro.report.build import default_claims_dir
from repro.report.colours import colour_for
from repro.report.plots import CLOCK_SENTENCES, axis_label, tasks_of
from repro.storage import staged_folder
from repro.track.runs import find_runs, read_run
from repro.track.series import CLOCKS, Run, cfg, label_of, points, seed_of, x_metric

GROUP_STYLES = ("-", "--", ":", "-.")
VARIANT_MARKERS = ("o", "s", "^", "D", "v", "P")  # a label's first variant: a line alone
COLUMNS = ["run", "label", "group", "run id", "points"]


@dataclass(frozen=True)
class Curve:
    """One run's curve as drawn: its legend name and its points."""

    name: str
    run: Run
    xs: list[float]
    ys: list[float]


def resolve(args: Sequence[str], runs_root: Path) -> list[Run]:
    """The runs the arguments name, each once, in argument order (see module doc)."""
    chosen: dict[str, Run] = {}
    known: list[Run] | None = None
    for arg in args:
        path = Path(arg)
        if path.exists():
            try:
                found = [read_run(path)]
            except UserError as err:  # a directory of runs, or read_run's reason why not
                found = find_runs(path) if path.is_dir() else []
                if not found:
                    raise err from None
        else:
            if known is None:
                if not runs_root.is_dir():
                    raise UserError(f"'{arg}' is not a path and runs root {runs_root} is missing")
                known = find_runs(runs_root)
            found = [r for r in known if arg in (r.run_id, r.group)]
            if not found:
                groups = ", ".join(sorted({str(r.group) for r in known})) or "none"
                raise UserError(
                    f"'{arg}' is not a run directory, run id or group under {runs_root} "
                    f"(groups: {groups})"
                )
        for run in found:  # a run directory's copy has the same id: the finished one is drawn
            kept = chosen.get(run.run_id)
            if kept is None or (kept.exit_code != 0 and run.exit_code == 0):
                chosen[run.run_id] = run
    return list(chosen.values())


@functools.cache
def _namer(paper: str) -> Callable[[str], str]:
    """How `paper`'s claims file names its methods; the bare label for runs of no paper."""
    try:
        return load_claims(paper, default_claims_dir()).display_name
    except UserError:
        return str


def _trial(run: Run) -> str:
    """A sweep or search trial's `trial:<n>` tag as ", trial n"; '' for any other run."""
    numbers = [t.removeprefix("trial:") for t in run.tags if t.startswith("trial:")]
    return f", trial {numbers[0]}" if numbers else ""


def _settings(run: Run) -> dict:
    """The settings that decide what a run computes, by dotted key
    (`repro.config.NON_IDENTITY_KEYS` say where and how it was kept)."""
    return {k: v for k, v in flat(run.config).items() if not k.startswith(NON_IDENTITY_KEYS)}


def _settings_apart(runs: Sequence[Run]) -> list[str]:
    """Each run's settings where it differs from the others (`key=value`, at most three)."""
    kept = [_settings(r) for r in runs]
    keys = sorted({k for each in kept for k in each})
    apart = [k for k in keys if len({repr(each.get(k)) for each in kept}) > 1]
    return [", ".join(f"{k}={fmt(each.get(k))}" for k in apart[:3]) for each in kept]


def _variants(runs: Sequence[Run]) -> list[int]:
    """Each run's variant among the runs of its label and group: the index, in order met, of
    its settings other than the seed (0 for all the seeds of one config)."""
    met: dict[tuple[str, str], list[str]] = {}
    variants = []
    for run in runs:
        seen = met.setdefault((label_of(run), run.group), [])
        settings = repr(sorted((k, v) for k, v in _settings(run).items() if k != "seed"))
        if settings not in seen:
            seen.append(settings)
        variants.append(seen.index(settings))
    return variants


def _names(runs: Sequence[Run]) -> list[str]:
    """Legend names: the method as its paper names it, with the run's group when runs come
    from several groups, a sweep trial's number (a sweep's trials share their label), its
    seed when two would otherwise read the same (one label run for several seeds), the
    settings where they differ when they still would (a `--multirun` over one setting), and
    its run id when even those are the same."""
    several = len({r.group for r in runs}) > 1
    methods = [_namer(str(cfg(r, "experiment.paper")))(label_of(r)) + _trial(r) for r in runs]
    names = [f"{r.group}: {m}" if several else m for m, r in zip(methods, runs, strict=True)]
    names = [
        f"{n}, seed {seed_of(r)}" if names.count(n) > 1 else n
        for n, r in zip(names, runs, strict=True)
    ]
    for name in {n for n in names if names.count(n) > 1}:
        alike = [i for i, n in enumerate(names) if n == name]
        for i, apart in zip(alike, _settings_apart([runs[i] for i in alike]), strict=True):
            names[i] = f"{name}, {apart}" if apart else name
    return [
        f"{n} ({r.run_id})" if names.count(n) > 1 else n for n, r in zip(names, runs, strict=True)
    ]


def curves(runs: Sequence[Run], metric: str, x: str) -> tuple[list[Curve], list[str]]:
    """The runs' numeric curves of `metric` against `x`, and a note per run without one."""
    out, skipped = [], []
    for name, run in zip(_names(runs), runs, strict=True):
        xs, ys = points(run, metric, x)
        if not ys or any(isinstance(y, str) for y in ys):
            skipped.append(f"{name}: logged no numeric '{metric}' against '{x_metric(x)}'")
            continue
        out.append(Curve(name, run, xs, [float(y) for y in ys]))
    if not out:
        logged = sorted(
            {k for r in runs for row in r.history for k in row if not k.startswith("_")}
        )
        raise UserError(
            f"none of the {len(runs)} runs logged '{metric}' against '{x_metric(x)}'; "
            f"--metric and --x take one of {', '.join(logged)} (--x also {', '.join(CLOCKS)})"
        )
    return out, skipped


def figure(drawn: list[Curve], metric: str, x: str, logy: bool):
    """The overlaid curves: a run's colour by its label, a line style by its group, and a
    marker by its settings where runs of one label and group differ in more than the seed
    (a `--multirun`), which would otherwise be drawn alike."""
    from matplotlib.figure import Figure  # loads only when a figure is drawn

    groups = list(dict.fromkeys(c.run.group for c in drawn))
    fig = Figure(figsize=(7.5, 4.5), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    for c, variant in zip(drawn, _variants([c.run for c in drawn]), strict=True):
        style = GROUP_STYLES[groups.index(c.run.group) % len(GROUP_STYLES)]
        # a run logged once is a point, which a line alone would not draw: the plain marker
        marked = variant or len(c.xs) == 1
        marker = VARIANT_MARKERS[variant % len(VARIANT_MARKERS)] if marked else None
        colour = colour_for(label_of(c.run))
        ax.plot(
            c.xs,
            c.ys,
            style,
            marker=marker,
            markevery=max(1, len(c.xs) // 8),
            markersize=4,
            color=colour,
            label=c.name,
            linewidth=1.5,
        )
    y = axis_label(metric, tasks_of(c.run for c in drawn))
    ax.set_title(f"{y} against {axis_label(x_metric(x))}")
    ax.set_xlabel(axis_label(x_metric(x)))
    ax.set_ylabel(y)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def page(
    drawn: list[Curve], skipped: list[str], metric: str, x: str, png: str, command: str
) -> Page:
    """The comparison page: the command that redraws it, the figure, each run's last point,
    and the runs that were not drawn."""
    xname = x_metric(x)
    heads = [*COLUMNS, f"last {xname}", f"last {metric}", "directory"]
    rows: list[list[Cell]] = []
    for c in drawn:
        ids = [c.name, label_of(c.run), str(c.run.group), c.run.run_id, str(len(c.xs))]
        rows.append([*ids, fmt(c.xs[-1]), fmt(c.ys[-1]), str(c.run.path)])
    clock = CLOCK_SENTENCES.get(xname, f"x axis: '{xname}'.")
    figure = FigureOut("", f"{metric} against {xname}", clock, png)
    blocks = [Para(("Regenerate: ", Code(command))), figure, Table("", heads, rows, breaks=False)]
    title = f"Comparison: {axis_label(metric, tasks_of(c.run for c in drawn))}"
    return Page(title, blocks, skipped, "Not drawn")


def main(argv: list[str]) -> int:
    p = CommandParser(prog="repro report compare", description=__doc__.splitlines()[0])
    p.add_argument("runs_or_groups", nargs="+", metavar="RUN_OR_GROUP")
    p.add_argument("--runs", default="runs", help="root run ids and groups are looked up in")
    p.add_argument("--metric", default="train/loss", help="y axis (default train/loss)")
    p.add_argument("--x", default="time/modeled_s", help="x axis: step, modeled, wall, a metric")
    p.add_argument("--logy", action="store_true", help="logarithmic y axis")
    p.add_argument("--out", default="reports/compare", help="output directory")
    args = p.parse_args(argv)
    runs = resolve(args.runs_or_groups, Path(args.runs))
    drawn, skipped = curves(runs, args.metric, args.x)
    out = Path(args.out)
    png = out / "compare.png"
    command = shlex.join(["repro", "report", "compare", *argv])
    compare_page = page(drawn, skipped, args.metric, args.x, png.name, command)
    with staged_folder(out, "--out") as stage:
        figure(drawn, args.metric, args.x, args.logy).savefig(stage / png.name, format="png")
        (stage / "compare.html").write_text(to_html(compare_page), encoding="utf-8")
    for note in skipped:
        print(f"not drawn: {note}")
    runs = counted(len(drawn), "run")
    print(f"wrote {png} and {out / 'compare.html'} ({runs})")
    return 0
