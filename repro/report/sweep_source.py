"""Which Pareto search a report's front figure reads: the full sweep when it has finished,
else the reproduction's own search.

A claims file's `sweep_fronts` entry names the full search (`sweeps/topk_cr_pareto.yaml`,
`make sweep`: 24 trials in `runs/sweeps/`). `repro reproduce` runs a smaller search of the
same space and trial regime with the set (`experiment.search`, `repro.reproduce.set_search`),
its study in the set's runs directory. The report prefers, in order: the full search once all
its trials have run (the larger search, when its base experiment is the runs' own), the
set's own search (the study of the set's settings with a completed trial, else the newest
one made with other settings, saying so), the full search part-way. None: the reason, with
the command that runs one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from repro.errors import UserError
from repro.sweep.front import Front, front_of
from repro.sweep.results import load_study
from repro.sweep.spec import SweepSpec, identity_name, load_spec, spec_path
from repro.sweep.study import tally
from repro.track.series import Seeded, cfg


@dataclass(frozen=True)
class Source:
    """A loaded study's front and where it came from, in words."""

    front: Front
    where: str
    finished: bool


def _load(spec: SweepSpec) -> Source | None:
    """The study's front, or None when the study does not exist or has no completed trial."""
    try:
        study = load_study(spec)
    except UserError:
        return None
    front = front_of(spec, study)
    if not front.front:
        return None
    done, _ = tally(study)
    where = f"{spec.name}, {len(front.trials)} completed of {spec.n_trials} trials"
    return Source(front, f"{where}, {spec.study_dir}", done >= spec.n_trials)


def _set(runs: Seeded) -> tuple[str, list[Path]]:
    """The runs' experiment (e.g. topk_small) and the directories holding them."""
    every = [run for by_seed in runs.values() for run in by_seed.values()]
    names = {str(cfg(run, "experiment.name", "")) for run in every}
    return (names.pop() if len(names) == 1 else ""), sorted({run.path.parent for run in every})


def set_search_spec(experiment: str) -> SweepSpec | None:
    """The search `experiment.search` of the set names (its `source` as the config writes
    it), None when it names none."""
    from repro.config import compose

    try:
        named = compose([f"experiment={experiment}"]).experiment.search
    except UserError:
        return None
    return replace(load_spec(spec_path(named)), source=named) if named else None


def _own(spec: SweepSpec, dirs: list[Path]) -> Source | None:
    """The set's search under the set's directories: the study of the set's own settings,
    else the newest one made with others (`repro reproduce` with overrides), which says so,
    as a report keeps a label's own run over one made otherwise."""
    journals = [j for d in dirs for j in d.glob(f"{spec.name}-*/journal.log")]
    own = identity_name(spec) if journals else ""
    for journal in sorted(journals, key=lambda j: (j.parent.name != own, -j.stat().st_mtime)):
        study_dir = journal.parent
        found = _load(replace(spec, name=study_dir.name, out=str(study_dir.parent)))
        if found is None:
            continue
        if study_dir.name == own:
            return found
        other = "not the set's own search: its trials ran with settings other than the set's"
        return replace(found, where=f"{found.where}; {other}")
    return None


def find_source(full_spec: str, runs: Seeded) -> Source | str:
    """The study to draw for the runs `runs`, or why there is none (with the command)."""
    experiment, dirs = _set(runs)
    full = load_spec(spec_path(full_spec))
    whole = _load(full) if full.experiment == experiment else None
    if whole is not None and whole.finished:
        return whole
    own_spec = set_search_spec(experiment) if experiment else None
    own = _own(own_spec, dirs) if own_spec is not None else None
    if own is not None or whole is not None:
        return own or whole
    paper, _, scale = experiment.rpartition("_")
    if own_spec is not None:
        return (
            f"the set's Pareto search ({own_spec.source}) has not run: `repro reproduce "
            f"{paper} scale={scale}` runs it after the set (finished runs are skipped)"
        )
    if full.experiment == experiment:
        return f"the Pareto search has not run: `repro sweep {full_spec}` runs it"
    return (
        f"experiment {experiment or '(none)'} names no Pareto search and {full_spec} searches "
        f"{full.experiment}: name a sweep spec of this set in experiment.search"
    )
