"""`build_report`: read a reproduction's runs back from disk, check its claims, write the report.

The runs come from `repro.track.runs.find_runs` (the files the runs wrote, never the memory
of a training process). A reproduction is the run group `<paper>_<scale>`; one report covers
exactly one scale, and a group whose runs disagree on the scale is refused rather than mixed.
Its runs are held as label -> seed -> run: claims are judged per seed and on the mean of the
seeds (`repro.claims.verdicts`), and figures draw every seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from repro.claims.claims_file import SCALES, ClaimsFile, load_claims
from repro.claims.fixed_terms import moved_for
from repro.claims.result import ClaimResult
from repro.claims.seed_caps import check_caps_for_scale
from repro.claims.set_regime import departures, set_settings
from repro.claims.verdicts import OffSet, evaluate
from repro.errors import UserError
from repro.pages.writer import FigureOut, to_html, to_markdown
from repro.report.missing_runs import report_command, reproduce_command
from repro.report.page import assemble
from repro.report.plots import clock_sentence, draw_figure, seeds_sentence
from repro.report.sweep_front import draw_sweep_front
from repro.storage import staged_folder, storage_error
from repro.track.runs import find_runs
from repro.track.series import NotMeasurable, Run, Seeded, cfg, label_of, natural_key, seed_of


def report_subdir(paper: str, scale: str) -> Path:
    """Where a paper's report at `scale` lies in the reports directory: the default scale's
    (`repro reproduce PAPER` without scale=, which the README's commands run) in `PAPER/`,
    any other scale's in `PAPER/SCALE/`. A page keeps its address whichever scales have runs,
    so a tiny run set never writes over the small set's page, nor leaves one behind."""
    return Path(paper) if scale == "small" else Path(paper) / scale


def default_claims_dir() -> Path:
    """`reports/claims/` of the source tree this package was installed from."""
    return Path(__file__).resolve().parents[2] / "reports" / "claims"


class Selection(NamedTuple):
    """What a report reads: the scale, the runs of group `<paper>_<scale>` as label -> seed
    -> run, notes on the choices, and `off`: label -> seed -> the settings where a kept run
    is not the run set's own (`repro.claims.set_regime`), which `evaluate` leaves unjudged."""

    scale: str
    runs: dict[str, dict[int, Run]]
    notes: list[str]
    off: dict[str, dict[int, list[str]]]


def made_here(run: Run) -> bool:
    """Whether `run` lies in the directory it was made in, by name (its summary's `run_dir`,
    from where it was made: a runs folder moved whole keeps its directories' names), not a
    copy of that directory under another name."""
    return run.path.name == Path(str(run.summary.get("run_dir", ""))).name


def select_runs(runs: Sequence[Run], paper: str, scale: str | None, where: str) -> Selection:
    """The runs one report of `paper` reads, and which of them are not the run set's.

    Refuses (UserError) when there is no such run, when several scales' groups exist and no
    scale was chosen, and when runs of the group name different scales. Of several runs with
    one label and seed the run set's own is kept (`repro.claims.set_regime`: not one made
    with extra overrides beside it), then a finished one over an unfinished one (a crashed
    run beside its re-run, or a copy of a run directory taken while it ran), then the one in
    the directory it was made in over a copy of it under another name (`made_here`), then the
    newest: a changed config or method default gets a run directory of its own, and the
    report must show what the current code computes. A label the set does not list (a
    method run beside it for a comparison) is never off the set.
    """
    scales = [scale] if scale else list(SCALES)
    groups = {f"{paper}_{s}": s for s in scales}
    found = sorted({run.group for run in runs if run.group in groups})
    if not found:
        at = f" at scale {scale}" if scale else ""
        how = reproduce_command(paper, scale, where)
        raise UserError(f"no runs for {paper}{at} under {where}: run `{how}` first")
    if len(found) > 1:
        raise UserError(
            f"runs of {paper} under {where} span groups {', '.join(found)}: pass "
            f"--scale {'|'.join(groups[g] for g in found)} (a report never mixes scales)"
        )
    group = found[0]
    members = [run for run in runs if run.group == group]
    declared = {str(cfg(run, "experiment.scale", groups[group])) for run in members}
    if declared != {groups[group]}:
        raise UserError(
            f"run group {group} under {where} mixes scales {', '.join(sorted(declared))}: "
            "a report never mixes scales; move the odd runs to their own group"
        )
    wanted = set_settings(group)
    away = {
        id(run): departures(run.config, wanted[label_of(run)]) if label_of(run) in wanted else []
        for run in members
    }

    def rank(run: Run) -> tuple[bool, bool, bool, float]:
        return not away[id(run)], run.exit_code == 0, made_here(run), run.started

    candidates: dict[tuple[str, int], list[Run]] = {}
    for run in members:
        candidates.setdefault((label_of(run), seed_of(run)), []).append(run)
    chosen: dict[str, dict[int, Run]] = {}
    off: dict[str, dict[int, list[str]]] = {}
    notes: list[str] = []
    for (label, seed), found in candidates.items():
        keep, *others = sorted(found, key=rank, reverse=True)
        chosen.setdefault(label, {})[seed] = keep
        if away[id(keep)]:
            off.setdefault(label, {})[seed] = away[id(keep)]
        if others:
            why = " (the run set's own)" if rank(keep)[0] > rank(others[0])[0] else ""
            copies = [str(o.path) for o in others if o.run_id == keep.run_id]
            if copies:
                why += f" from {keep.path}, not its copy in {copies[0]}"
            notes.append(
                f"several runs labelled '{label}' with seed {seed}: kept run {keep.run_id}{why}"
            )
    by_label = {
        label: dict(sorted(chosen[label].items())) for label in sorted(chosen, key=natural_key)
    }
    return Selection(groups[group], by_label, notes, off)


def ordered(claims: ClaimsFile, runs: Seeded) -> dict[str, Mapping[int, Run]]:
    """Runs in the order the claims file's `methods` names them (baseline first)."""
    return dict(sorted(runs.items(), key=lambda kv: claims.order_key(kv[0])))


def draw_figures(claims: ClaimsFile, runs: Seeded, folder: Path) -> list[FigureOut]:
    """The claims file's figures and sweep fronts drawn into `folder`; a figure with
    nothing to draw comes back with the reason instead of a file."""
    figures = []
    for spec in claims.figures:
        seeds = seeds_sentence(spec, runs, claims.display_name)
        caption = f"{spec.caption} {clock_sentence(spec)} {seeds}".strip()
        try:
            path = draw_figure(spec, runs, claims.display_name, folder / f"{spec.id}.svg")
        except NotMeasurable as err:
            figures.append(FigureOut(spec.id, spec.title, caption, None, str(err), spec.headline))
            continue
        figures.append(FigureOut(spec.id, spec.title, caption, path.name, headline=spec.headline))
    return figures + [draw_sweep_front(front, folder, runs) for front in claims.sweep_fronts]


def render_parts(
    claims: ClaimsFile,
    runs: Seeded,
    scale: str,
    out_dir: Path,
    *,
    command: str,
    notes: Sequence[str] = (),
    off: OffSet | None = None,
    runs_root: str = "runs",
) -> tuple[list[ClaimResult], list[FigureOut]]:
    """Evaluate the claims, draw the figures and write report.md + report.html in `out_dir`
    (renamed into place together once all are written: `staged_folder`); returns the results
    and figures, which the index page shows again. `off` lists the runs that are not the run
    set's (`repro.report.build.Selection.off`); `runs_root`, where they were read, is where
    the commands the page gives make runs.

    Figures that have nothing to draw come back with the reason instead of a file, so a page
    refers only to files that exist, and an earlier report's file of that figure is removed.
    """
    runs, out_dir = ordered(claims, runs), Path(out_dir)
    made = set_settings(f"{claims.paper}_{scale}")
    results = evaluate(claims.claims, runs, scale, off, made, moved_for(claims.claims, runs))
    with staged_folder(out_dir, "--out") as stage:
        figures = draw_figures(claims, runs, stage)
        regenerate = [*notes, f"Regenerate: {command}"]
        page = assemble(claims, runs, scale, results, figures, regenerate, out_dir, off, runs_root)
        (stage / "report.md").write_text(to_markdown(page), encoding="utf-8")
        (stage / "report.html").write_text(to_html(page), encoding="utf-8")
    # after the new page is in place: had the move failed, the old page kept its figures
    _remove_undrawn(claims, figures, out_dir)
    return results, figures


def _remove_undrawn(claims: ClaimsFile, figures: Sequence[FigureOut], out_dir: Path) -> None:
    """Remove the files an earlier report drew for a figure this one could not draw: left,
    a figure of runs since removed or replaced sat beside the page that calls it missing.
    Only the claims file's own figure names are touched, never another file there."""
    fronts = {front.id for front in claims.sweep_fronts}
    for figure in figures:
        if figure.file is None:
            for suffix in (".svg", ".csv", ".html") if figure.id in fronts else (".svg",):
                try:
                    (out_dir / f"{figure.id}{suffix}").unlink(missing_ok=True)
                except OSError as e:
                    raise storage_error(out_dir, e, "--out") from None


def build_report(
    paper: str,
    runs_root: Path,
    reports: Path,
    *,
    into: Path | None = None,
    scale: str | None = None,
    claims_dir: Path | None = None,
    command: str | None = None,
) -> Path:
    """Report for `paper` from the runs under `runs_root`, written into its directory in
    `reports` (`report_subdir`), or into exactly `into`.

    `command` is the command line the page names for regenerating it (by default the report
    command of the scale read, `report_command`: the user's own might leave the scale to a
    choice that other runs later change). Returns the path of report.html (report.md and
    the figures' SVGs lie beside it).
    """
    folder = claims_dir or default_claims_dir()
    claims = load_claims(paper, folder)
    runs_root = Path(runs_root)
    root = str(runs_root)
    found = find_runs(runs_root, None) if runs_root.is_dir() else []
    chosen_scale, runs, notes, off = select_runs(found, paper, scale, root)
    check_caps_for_scale(claims, chosen_scale, folder / f"{paper}.yaml")
    given = str(claims_dir) if claims_dir else None
    where = str(into) if into else None
    command = command or report_command(paper, chosen_scale, root, str(reports), where, given)
    out_dir = into or Path(reports) / report_subdir(paper, chosen_scale)
    render_parts(
        claims, runs, chosen_scale, out_dir, command=command, notes=notes, off=off, runs_root=root
    )
    return out_dir / "report.html"
