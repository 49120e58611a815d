"""`repro sweep show`: the Pareto front table, the knee point, the front's files and figures.

The whole study's front is Optuna's own `study.best_trials` (the non-dominated completed trials).
Added here is what Optuna lacks: the knee (the front point closest to the ideal after scaling every
objective to [0, 1], `repro.sweep.front.knee_index`) and, with `group_by`, one front per value of a
categorical parameter (`group_front` on that group's trials). Written beside the study:

* `front.csv`: every front trial, its parameters and objectives (`repro.sweep.front`);
* `pareto.png` and `pareto.html`: the front drawn here, coloured by a categorical parameter
  (the collective of the Top-k CR sweep), labelled by trial number, the knee a ring around
  its point; the HTML page is interactive (hover shows a trial's settings) and needs no
  network (`repro.sweep.front_page`). One objective: the value per trial, the best ringed;
* `hypervolume.png/.html` (two or more objectives, the page written by the reports' page
  writer, `repro.pages.writer`): Optuna's hypervolume history against the
  reference point of `reference_point` (its matplotlib flavour, so no plotly is
  needed); a curve that flattens says more trials would add little.

`pareto_front` is the piece a report reuses (e.g. the Top-k CR front beside the paper's CRs).
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path
from typing import Any, TextIO

from repro.errors import UserError
from repro.pages.writer import Page, Pre, Raw, to_html
from repro.storage import staged_folder
from repro.sweep.front import (
    Front,
    front_of,
    front_rows,
    group_front,
    reference_point,
    result_words,
    to_min,
    write_csv,
)
from repro.sweep.front_page import write_front_page
from repro.sweep.front_plot import plot_front_png
from repro.sweep.space import shown, shown_settings
from repro.sweep.spec import SweepSpec
from repro.sweep.stops import stop_reason
from repro.sweep.storage import open_storage
from repro.sweep.study import check_study, completed

LOST = "lost with its worker (no heartbeat within grace_s); its point was queued again"


def load_study(spec: SweepSpec) -> Any:
    import optuna

    if spec.storage is None and not (spec.study_dir / "journal.log").exists():
        raise UserError(f"no study {spec.name} yet in {spec.storage_label}; run the sweep first")
    try:
        study = optuna.load_study(study_name=spec.name, storage=open_storage(spec))
    except KeyError:
        msg = f"no study {spec.name} in {spec.storage_label}; run the sweep first"
        raise UserError(msg) from None
    check_study(spec, study)  # a study of another sweep would be shown under this one's labels
    return study


def pareto_front(spec: SweepSpec) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The study's front as rows `{trial, params, values}` ordered by the first objective, and
    the knee row. Raises `UserError` when the sweep has not completed a trial yet."""
    rows, knee = front_rows(spec, load_study(spec).best_trials)
    if not rows:
        raise UserError(f"study {spec.name} has no completed trial yet: no Pareto front")
    return rows, rows[knee]


def format_table(spec: SweepSpec, rows: list[dict[str, Any]], knee: int) -> str:
    keys = [p.key for p in spec.space]
    header = ["", "trial", *keys, *spec.metric_names]
    body = [
        [
            "*" if i == knee else "",
            str(r["trial"]),
            *(shown(r["params"].get(k, "-")) for k in keys),
            *(shown(r["values"][m]) for m in spec.metric_names),
        ]
        for i, r in enumerate(rows)
    ]
    widths = [max(len(line[c]) for line in [header, *body]) for c in range(len(header))]
    return "\n".join(
        "  ".join(s.rjust(w) for s, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *body]
    )


def plot_front(front: Front, folder: Path) -> list[Path]:
    """The front's table and figures in `folder`: front.csv, pareto.png, pareto.html."""
    spec, directions = front.spec, ", ".join(front.spec.directions)
    if len(spec.metric_names) == 1:
        against = "per trial" if front.searched is None else f"against {front.searched.key}"
        title = f"{spec.name}: {spec.metric_names[0]} {against} ({directions}), best ringed"
    else:
        extra = f", first 2 of {len(spec.metric_names)}" if len(spec.metric_names) > 2 else ""
        title = f"{spec.name}: Pareto front ({directions}{extra})"
    return [
        write_csv(front, folder / "front.csv"),
        plot_front_png(front, folder / "pareto.png", title),
        write_front_page(front, folder / "pareto.html", title),
    ]


def plot_hypervolume(spec: SweepSpec, study: Any, trials: list[Any], folder: Path) -> list[Path]:
    """Optuna's hypervolume history (two or more objectives) in `folder`: `hypervolume.png` and
    a standalone `hypervolume.html` (inline SVG and the data as a table). Optuna takes the
    reference point in the objectives' own directions, `reference_point` gives it minimised.
    Optuna's matplotlib plots restyle matplotlib globally and are marked experimental: both
    are kept to this figure."""
    import matplotlib
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as optuna_plots

    ref = to_min(reference_point([t.values for t in trials], spec.directions), spec.directions)
    title = f"{spec.name}: hypervolume history"
    svg = io.StringIO()
    with (
        matplotlib.rc_context(),
        warnings.catch_warnings(action="ignore", category=optuna.exceptions.ExperimentalWarning),
    ):
        ax = optuna_plots.plot_hypervolume_history(study, ref)
        line = ax.lines[0]
        table = "reference point: " + ", ".join(f"{r:.4g}" for r in ref) + "\n"
        table += "\n".join(
            f"trial {int(n):>4}  {h:.6g}"
            for n, h in zip(line.get_xdata(), line.get_ydata(), strict=True)
        )
        ax.set_title(title)
        ax.figure.set_layout_engine("constrained")
        ax.figure.savefig(folder / "hypervolume.png", dpi=120)
        ax.figure.savefig(svg, format="svg")
        plt.close(ax.figure)
    inline = svg.getvalue()[svg.getvalue().find("<svg") :]
    page = to_html(Page(title, [Raw(inline), Pre(table)]))
    (folder / "hypervolume.html").write_text(page, encoding="utf-8")
    return [folder / "hypervolume.png", folder / "hypervolume.html"]


def show_sweep(spec: SweepSpec, stream: TextIO = sys.stdout) -> dict[str, Any]:
    """Print the failed trials' reasons, the front and its knee (then again per `group_by`
    value, if set); write the plots. Returns the fronts, knees and written files."""
    from optuna.trial import TrialState

    study = load_study(spec)
    trials = completed(study)
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    print(
        f"study {spec.name} ({spec.storage_label}): {len(trials)} complete, {len(failed)} failed",
        file=stream,
    )
    for t in failed:
        reason = t.user_attrs.get("fail_reason") or stop_reason(t) or t.user_attrs.get("stale")
        print(f"  failed trial {t.number}: {reason or LOST}", file=stream)
    if not trials:
        raise UserError(f"study {spec.name} has no completed trial yet: nothing to show")
    groups: dict[Any, list[Any]] = {}
    if spec.group_by is not None:
        for t in trials:
            groups.setdefault(t.params.get(spec.group_by), []).append(t)
    result: dict[str, Any] = {"groups": {}}
    front = front_of(spec, study)
    fronts = [
        (value, members, front_rows(spec, group_front(spec, members)))
        for value, members in groups.items()
    ]
    found, mark = result_words(spec)
    for value, members, (rows, knee) in [(None, trials, (front.front, front.knee)), *fronts]:
        label = "" if value is None else f" for {spec.group_by}={value}"
        tied = len(rows) > 1 and mark == "best"
        head = f"{found.capitalize()}{'s' if tied else ''}{label}{', tied' if tied else ''}"
        print(
            f"\n{head} ({len(rows)} of {len(members)} completed trials; * = {mark}):",
            file=stream,
        )
        print(format_table(spec, rows, knee), file=stream)
        k = rows[knee]
        print(
            f"{mark}{label}: trial {k['trial']} {shown_settings(k['params'])} -> "
            f"{shown_settings(k['values'])}",
            file=stream,
        )
        if value is not None:
            result["groups"][value] = {"front": rows, "knee": k}
    with staged_folder(spec.study_dir, "the spec's `out:`") as stage:
        written = plot_front(front, stage)
        if len(spec.metric_names) > 1:
            written += plot_hypervolume(spec, study, trials, stage)
    files = [spec.study_dir / f.name for f in written]
    print("\nwrote " + ", ".join(str(f) for f in files), file=stream)
    result.update(front=front.front, knee=front.knee_row, files=files)
    return result
