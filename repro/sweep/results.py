"""`repro sweep show`: the Pareto front table, the knee point and the two plots.

Issue 7, "Results": the study's best trials (the non-dominated completed trials) with their
parameters and objectives, the knee (the front point closest to the ideal after scaling every
objective to [0, 1], `pareto.knee_index`), and two figures, each as PNG and as a standalone
HTML page (inline SVG plus the data table, so it needs no plotting server or extra package):

* `pareto.png/.html`: every completed trial in the plane of the first two objectives (one
  objective: value against trial number), the front joined up, the knee starred;
* `hypervolume.png/.html`: hypervolume of the completed trials after each completion, against
  the reference point of `pareto.reference_point`; a rising curve that flattens says more
  trials would add little.

`pareto_front` is the piece a report reuses (e.g. the Top-k CR front beside the paper's CRs).
"""

from __future__ import annotations

import html
import io
import sys
from pathlib import Path
from typing import Any, TextIO

from repro.errors import UserError
from repro.sweep.pareto import hypervolume_history, knee_index, pareto_indices, reference_point
from repro.sweep.spec import SweepSpec
from repro.sweep.storage import open_storage


def load_study(spec: SweepSpec) -> Any:
    import optuna

    if spec.storage is None and not (spec.study_dir / "journal.log").exists():
        raise UserError(f"no study {spec.name} yet in {spec.storage_label}; run the sweep first")
    try:
        return optuna.load_study(study_name=spec.name, storage=open_storage(spec))
    except KeyError:
        msg = f"no study {spec.name} in {spec.storage_label}; run the sweep first"
        raise UserError(msg) from None


def _completed(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return sorted(done, key=lambda t: (t.datetime_complete, t.number))


def _row(spec: SweepSpec, t: Any) -> dict[str, Any]:
    return {
        "trial": t.number,
        "params": dict(t.params),
        "values": dict(zip(spec.metric_names, t.values, strict=True)),
    }


def front_rows(spec: SweepSpec, trials: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """The non-dominated trials as rows ordered by the first objective, and the knee's index."""
    idx = pareto_indices([t.values for t in trials], spec.directions)
    front = sorted((trials[i] for i in idx), key=lambda t: (t.values[0], t.number))
    if not front:
        return [], -1
    return [_row(spec, t) for t in front], knee_index([t.values for t in front], spec.directions)


def pareto_front(spec: SweepSpec) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The study's front as rows `{trial, params, values}` ordered by the first objective, and
    the knee row. Raises `UserError` when the sweep has not completed a trial yet."""
    rows, knee = front_rows(spec, _completed(load_study(spec)))
    if not rows:
        raise UserError(f"study {spec.name} has no completed trial yet: no Pareto front")
    return rows, rows[knee]


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def format_table(spec: SweepSpec, rows: list[dict[str, Any]], knee: int) -> str:
    keys = [p.key for p in spec.space]
    header = ["", "trial", *keys, *spec.metric_names]
    body = [
        [
            "*" if i == knee else "",
            str(r["trial"]),
            *(_fmt(r["params"].get(k, "-")) for k in keys),
            *(_fmt(r["values"][m]) for m in spec.metric_names),
        ]
        for i, r in enumerate(rows)
    ]
    widths = [max(len(line[c]) for line in [header, *body]) for c in range(len(header))]
    return "\n".join(
        "  ".join(s.rjust(w) for s, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *body]
    )


def _figure_pair(fig: Any, stem: Path, title: str, table: str) -> list[Path]:
    """Write `stem.png` and a standalone `stem.html` (inline SVG + the data as a table)."""
    fig.savefig(stem.with_suffix(".png"), dpi=120)
    svg = io.StringIO()
    fig.savefig(svg, format="svg")
    inline = svg.getvalue()[svg.getvalue().find("<svg") :]
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title></head><body><h1>{html.escape(title)}</h1>{inline}"
        f"<pre>{html.escape(table)}</pre></body></html>\n"
    )
    stem.with_suffix(".html").write_text(page)
    return [stem.with_suffix(".png"), stem.with_suffix(".html")]


def plot_pareto(
    spec: SweepSpec, trials: list[Any], rows: list[dict], knee: int, table: str
) -> list[Path]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.8), layout="constrained")
    ax = fig.add_subplot()
    names = spec.metric_names
    if len(names) == 1:
        ax.scatter(
            [t.number for t in trials], [t.values[0] for t in trials], c="0.6", label="trial"
        )
        ax.scatter(
            [r["trial"] for r in rows],
            [r["values"][names[0]] for r in rows],
            c="C0",
            marker="*",
            s=160,
            label="best",
        )
        ax.set_xlabel("trial")
        ax.set_ylabel(f"{names[0]} ({spec.directions[0]})")
    else:
        ax.scatter(
            [t.values[0] for t in trials], [t.values[1] for t in trials], c="0.6", label="trial"
        )
        fx, fy = [r["values"][names[0]] for r in rows], [r["values"][names[1]] for r in rows]
        ax.plot(fx, fy, "o-", c="C0", label="Pareto front")
        ax.scatter([fx[knee]], [fy[knee]], c="C3", marker="*", s=220, zorder=3, label="knee")
        ax.set_xlabel(f"{names[0]} ({spec.directions[0]})")
        ax.set_ylabel(f"{names[1]} ({spec.directions[1]})")
    extra = f" (first 2 of {len(names)} objectives)" if len(names) > 2 else ""
    title = f"{spec.name}: Pareto front{extra}"
    ax.set_title(title)
    ax.legend()
    return _figure_pair(fig, spec.study_dir / "pareto", title, table)


def plot_hypervolume(spec: SweepSpec, trials: list[Any]) -> list[Path]:
    from matplotlib.figure import Figure

    points = [t.values for t in trials]
    ref = reference_point(points, spec.directions)
    history = hypervolume_history(points, spec.directions, ref)
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(range(1, len(history) + 1), history, "o-")
    ax.set_xlabel("completed trials")
    ax.set_ylabel("hypervolume")
    title = f"{spec.name}: hypervolume history"
    ax.set_title(title)
    table = "reference point (minimise form): " + ", ".join(f"{r:.4g}" for r in ref) + "\n"
    table += "\n".join(
        f"{k:>4}  trial {t.number:>4}  {h:.6g}"
        for k, (t, h) in enumerate(zip(trials, history, strict=True), 1)
    )
    return _figure_pair(fig, spec.study_dir / "hypervolume", title, table)


def show_sweep(spec: SweepSpec, stream: TextIO = sys.stdout) -> dict[str, Any]:
    """Print the failed trials' reasons, the front and its knee (then again per `group_by`
    value, if set); write the plots. Returns the fronts, knees and written files."""
    from optuna.trial import TrialState

    study = load_study(spec)
    trials = _completed(study)
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    print(
        f"study {spec.name} ({spec.storage_label}): {len(trials)} complete, {len(failed)} failed",
        file=stream,
    )
    for t in failed:
        reason = t.user_attrs.get("fail_reason") or t.user_attrs.get("stale") or "unknown"
        print(f"  failed trial {t.number}: {reason}", file=stream)
    if not trials:
        raise UserError(f"study {spec.name} has no completed trial yet: nothing to show")
    groups: dict[Any, list[Any]] = {}
    if spec.group_by is not None:
        for t in trials:
            groups.setdefault(t.params.get(spec.group_by), []).append(t)
    result: dict[str, Any] = {"groups": {}}
    for value, members in [(None, trials), *groups.items()]:
        rows, knee = front_rows(spec, members)
        label = "" if value is None else f" for {spec.group_by}={value}"
        print(
            f"\nPareto front{label} ({len(rows)} of {len(members)} completed trials; * = knee):",
            file=stream,
        )
        table = format_table(spec, rows, knee)
        print(table, file=stream)
        k = rows[knee]
        print(
            f"knee{label}: trial {k['trial']} "
            + ", ".join(f"{p}={_fmt(v)}" for p, v in k["params"].items())
            + " -> "
            + ", ".join(f"{m}={_fmt(v)}" for m, v in k["values"].items()),
            file=stream,
        )
        if value is not None:
            result["groups"][value] = {"front": rows, "knee": k}
    rows, knee = front_rows(spec, trials)
    files = plot_pareto(spec, trials, rows, knee, format_table(spec, rows, knee))
    files += plot_hypervolume(spec, trials)
    print("\nwrote " + ", ".join(str(f) for f in files), file=stream)
    result.update(front=rows, knee=rows[knee], files=files)
    return result
