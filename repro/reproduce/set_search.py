"""A run set's search: the sweep `experiment.search` names, run once by `repro reproduce`.

The Flexible Top-k set's is a small search over the compression ratio and the
collective (`sweeps/topk_cr_pareto_<scale>.yaml`), so that its report can draw the
accuracy-throughput Pareto front beside the ratios the paper's MOO controller chose (Eq. 6)
without a separate `repro sweep` step. It is an ordinary sweep (`repro.sweep.launch`):
its study lives in a journal file, its trials are training runs, one per core, and a kill
or Ctrl-C loses nothing (the next `repro reproduce` continues the study, a lost trial resumes
from its checkpoint, a finished study runs nothing).

Where: the study and its trials' run directories go inside the set's runs directory,
`<runs_root>/<experiment>/<search name>-<hash>/` (`trial_<n>/` each), the hash being the
identity of the search's base config (the set's experiment, the spec's overrides and the
command line's), as a run's directory is named by its config: a changed setting starts a
fresh study instead of extending one made under other settings. The report reads the set's
own (no command-line overrides) where it exists.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from repro.config import Config, ExperimentConfig, run_dir_of
from repro.errors import UserError
from repro.sweep.space import shown_settings
from repro.sweep.spec import SweepSpec, identity_name, load_spec, spec_path


def search_spec(experiment: ExperimentConfig, set_dir: Path, extra: list[str]) -> SweepSpec:
    """The set's search spec, its study under `set_dir` and the command line's overrides
    (`extra`, applied after the spec's own) in every trial."""
    where = f"experiment.search={experiment.search}"
    spec = load_spec(spec_path(experiment.search))
    if spec.experiment != experiment.name:
        raise UserError(
            f"{where} searches experiment {spec.experiment}, not this set's "
            f"{experiment.name}; set its `experiment: {experiment.name}`"
        )
    spec = replace(spec, overrides=(*spec.overrides, *extra), out=str(set_dir))
    return replace(spec, name=identity_name(spec))


def set_dir_of(cfg: Config) -> Path:
    """The directory holding a set's runs (and its search's study)."""
    return run_dir_of(cfg).parent


def search_minutes(spec: SweepSpec, experiment: ExperimentConfig, workers: int) -> str:
    """The expected-time phrase of the search, from `experiment.search_minutes`."""
    what = f"a Pareto search of {spec.n_trials} trials ({experiment.search}), {workers} at a time"
    if experiment.search_minutes <= 0:
        return f"{what}: not measured (experiment.search_minutes)"
    return f"{what}: about {experiment.search_minutes / workers:.1f} min"


def run_search(spec: SweepSpec, experiment: ExperimentConfig, workers: int) -> None:
    """Run (or continue) the set's search here, printing what it does and, at its end, the
    knee of its front."""
    from repro.sweep.launch import run_sweep
    from repro.sweep.results import pareto_front

    print(
        f"search: {search_minutes(spec, experiment, workers)}; study and trial runs in "
        f"{spec.study_dir} (each trial prints a line as it finishes)",
        flush=True,
    )
    run_sweep(spec, workers=workers)
    rows, knee = pareto_front(spec)
    print(
        f"search {spec.name}: {len(rows)} of its trials on the Pareto front; knee: trial "
        f"{knee['trial']}: {shown_settings(knee['params'])} -> {shown_settings(knee['values'])}",
        flush=True,
    )
