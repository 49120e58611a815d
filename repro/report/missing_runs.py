"""The runs a report needs and does not have, said once, with the command that makes them.

A claim, a figure or a published-beside-ours table may name a run label that has no run in
the group: the claim is then "not run", the figure is drawn without it (or not at all), the
table row says "not run". Rather than repeating advice at every place, the page names each
missing label once, with what reads it, and the one command that makes the runs: the
reproduction at the report's scale when its run set (`configs/experiment/<paper>_<scale>.yaml`)
lists the label; a label that set does not list is said to belong to another scale's set.
A run made otherwise than the set makes it (extra overrides: `repro.claims.set_regime`) is
not the set's run either: its label is named with the settings that depart, once, beside the
same command.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from repro.claims.claims_file import ClaimsFile
from repro.claims.reads import labels_made, labels_read, seeds_read, seeds_short
from repro.claims.result import ClaimResult
from repro.claims.set_regime import set_settings
from repro.claims.verdicts import OffSet, rungs_missing
from repro.config import CONFIG_DIR, set_scales
from repro.override_quoting import command_line, quoted
from repro.pages.writer import Code, Para
from repro.track.runs import unfinished, untracked_run_dirs
from repro.track.series import Seeded, any_seed


def reproduce_command(paper: str, scale: str | None, runs_root: str, seeds: int = 0) -> str:
    """The `repro reproduce` command that makes a paper's runs under `runs_root` (for
    `seeds` seeds, where more than the set's own). The small scale (`repro reproduce`'s
    default) of a paper without a small set becomes the first it has: a paper of one's own
    may have a tiny set alone."""
    sets = set_scales(paper)
    if sets and (scale or "small") == "small" and "small" not in sets:
        scale = sets[0]
    command = ["repro", "reproduce", paper, *([f"scale={scale}"] if scale else [])]
    command += [f"seeds={seeds}"] if seeds else []
    if Path(runs_root) != Path("runs"):
        command.append(quoted("runs_root", str(runs_root)))
    return command_line(command)


def report_command(
    paper: str,
    scale: str,
    runs_root: str,
    out: str,
    into: str | None = None,
    claims: str | None = None,
) -> str:
    """The `repro report` command that builds a paper's report at `scale` from the runs under
    `runs_root` into its folder under `out` (exactly `into`, if given), with `claims` if not
    the default: every place that names the command (a page's Regenerate line, the index,
    a run set submitted as jobs) gives this one."""
    command = ["repro", "report", paper, "--runs", runs_root, "--scale", scale]
    command += ["--dir", into] if into else ["--out", out]
    command += ["--claims", claims] if claims else []
    return shlex.join(command)


Needs = dict[tuple[str, int | None], list[str]]
"""(label, seed: None for every seed) -> what reads that missing run."""


def needed_missing(
    claims: ClaimsFile, runs: Seeded, results: list[ClaimResult], scale: str
) -> Needs:
    """(label, None) -> what reads it ("claim x", "figure f", "table t", by id), for every
    label a claim, figure or table names that has no run; (label, N) for a label a claim is
    judged on at seed N that has no run there (a seed between two of the claim's whole
    seeds); in the order first named. A claim that reads the runs a pattern or a `where`
    selects, and finds some of the set's labels it selects, reads the others too
    (`rungs_missing`); one whose pattern matches none, the labels of the set it matches."""
    present = any_seed(runs)
    made = set_settings(f"{claims.paper}_{scale}")
    needs: Needs = {}

    def need(label: str, reader: str, seed: int | None = None) -> None:
        if (seed is None) == (label in present):  # a label's run at every seed, or one seed's
            return
        if reader not in needs.setdefault((label, seed), []):
            needs[(label, seed)].append(reader)

    for r in results:
        calculator, params = r.claim.metric["calculator"], r.claim.metric.get("params") or {}
        # a ladder with a rung missing; or, where nothing matches a pattern, what it names
        pattern = params.get("pattern")
        unmatched = pattern is not None and not any(re.fullmatch(pattern, x) for x in present)
        selected = sorted(labels_made(calculator, params, made)) if unmatched else []
        expected = rungs_missing(r.claim, runs, scale, made) or selected
        for label in [*sorted(labels_read(calculator, params, present)), *expected]:
            need(label, f"claim {r.claim.id}")
        judged = seeds_read(calculator, params, runs)
        for seed, labels in seeds_short(calculator, params, runs).items():
            for label in labels if seed in judged else []:
                need(label, f"claim {r.claim.id}", seed)
    for spec in claims.figures:
        named = [] if spec.runs == "all" else list(spec.runs)
        reference = spec.measure.get("reference")
        for label in [*named, *([reference] if isinstance(reference, str) else [])]:
            need(label, f"figure {spec.id}")
    for front in claims.sweep_fronts:
        if front.chosen_run:
            need(front.chosen_run, f"figure {front.id}")
    for table in claims.tables:
        for row in table.parsed:
            need(row.run, f"table {table.id}")
    return needs


def _experiment(paper: str, scale: str, config_dir: Path) -> dict | None:
    path = config_dir / "experiment" / f"{paper}_{scale}.yaml"
    if not path.is_file():
        return None
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("experiment") or {}


def _set_command(
    paper: str, scale: str, runs_root: str, seeds: list[int], config_dir: Path = CONFIG_DIR
) -> str:
    """The set's `repro reproduce` command that makes runs at `seeds`: with `seeds=N` (their
    count up to the last) when that lies past the seeds the set makes unless told (1 without
    a set)."""
    upto = max(seeds, default=-1) + 1
    own = int((_experiment(paper, scale, config_dir) or {}).get("seeds") or 1)
    return reproduce_command(paper, scale, runs_root, upto if upto > own else 0)


def _listed(needs: Needs, runs: list[tuple[str, int | None]]) -> str:
    """ "a, b seed=3 (read by claims x, y; figure f)": the runs, then their readers by kind."""
    by_kind: dict[str, list[str]] = {}
    for run in runs:
        for reader in needs[run]:
            kind, name = reader.split(" ", 1)
            if name not in by_kind.setdefault(kind, []):
                by_kind[kind].append(name)
    readers = "; ".join(
        f"{kind}{'s' if len(names) > 1 else ''} {', '.join(names)}"
        for kind, names in by_kind.items()
    )
    named = [label if seed is None else f"{label} seed={seed}" for label, seed in runs]
    return f"{', '.join(named)} (read by {readers})"


def missing_notes(
    paper: str,
    scale: str,
    needs: Needs,
    config_dir: Path = CONFIG_DIR,
    runs_root: str = "runs",
) -> list[Para]:
    """The runs the report lacks and the one command that makes them under `runs_root`,
    where the report reads: the set's command, which makes a missing label at the set's
    seeds and adds seeds where its claims need them (`_set_command`); apart, in small print,
    the labels this scale's run set does not make (what reads them is for another scale).
    Empty when nothing is missing."""
    experiment = _experiment(paper, scale, config_dir)
    in_set = None if experiment is None else experiment.get("runs") or {}
    ours = [run for run in needs if in_set is None or run[0] in in_set]
    other = [run for run in needs if run not in ours]
    notes = []
    if ours:
        seeds = [seed for _, seed in ours if seed is not None]
        command = _set_command(paper, scale, runs_root, seeds, config_dir)
        text = (f"Runs missing: {_listed(needs, ours)}. Make them with ", Code(command), ".")
        labels = {label for label, _ in ours}
        group_dir = Path(runs_root) / f"{paper}_{scale}"
        untracked = [d for d in untracked_run_dirs(group_dir) if d.name.rsplit("-", 1)[0] in labels]
        if untracked:
            text += (
                f" Made with tracking=disabled, {', '.join(map(str, untracked))} logged no "
                "curves a report reads, and the command skips them as finished: remove them "
                "first.",
            )
        notes.append(Para(text, css="missing"))
    if other:
        notes.append(
            Para(
                f"Not in the {paper}_{scale} run set, so never made at this scale: "
                f"{_listed(needs, other)}.",
                css="rule",
            )
        )
    return notes


def unfinished_notes(
    paper: str,
    scale: str,
    runs: Seeded,
    runs_root: str = "runs",
) -> list[Para]:
    """The runs read that have not run to their end (`repro.track.runs.unfinished`), and the
    command that finishes them: the set's own, which resumes each from its last checkpoint
    (`seeds=N` where one lies past the set's seeds)."""
    cut = unfinished(runs)
    if not cut:
        return []
    named = [
        f"{label} seed={seed} ({why})"
        for label, by_seed in cut.items()
        for seed, why in sorted(by_seed.items())
    ]
    seeds = [seed for by_seed in cut.values() for seed in by_seed]
    text = (
        f"Runs not finished: {', '.join(named)}. A run cut short is not a measurement: the "
        "claims that read them are not assessed. ",
        Code(_set_command(paper, scale, runs_root, seeds)),
        " finishes them, each from its last checkpoint.",
    )
    return [Para(text, css="missing")]


def off_set_notes(paper: str, scale: str, off: OffSet, runs_root: str = "runs") -> list[Para]:
    """The runs standing in for the set's own, made with other settings (label -> seed ->
    departures, `repro.report.build.Selection.off`): each label with its seeds and settings,
    and the command that makes the set's runs, which a report then reads instead."""
    if not off:
        return []
    parts = []
    for label, by_seed in off.items():
        settings = "; ".join(dict.fromkeys(t for found in by_seed.values() for t in found))
        seeds = ", ".join(str(seed) for seed in sorted(by_seed))
        parts.append(f"{label} (seed{'s' if len(by_seed) > 1 else ''} {seeds}: {settings})")
    command = reproduce_command(paper, scale, runs_root)
    text = (
        f"Runs not the {paper}_{scale} run set's, made with other settings: "
        f"{', '.join(parts)}. The claims that read them are not assessed. ",
        Code(command),
        " makes the set's own runs, which the report then reads instead.",
    )
    return [Para(text, css="missing")]
