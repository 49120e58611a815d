"""A paper's run set: every run `repro reproduce PAPER` makes, composed from data.

The run set is data: `experiment.runs` in `configs/experiment/<paper>_<scale>.yaml` maps each
run's label to the overrides that make it, and `experiment.seeds` says for how many seeds each
run is made (seed, seed + 1, ..., seed + N - 1; `seed` is 0 unless overridden), so that a
report can judge every claim per seed and on their mean (`repro.claims.verdicts`). Every
(label, seed) is an ordinary training run in its own directory
(runs/<paper>_<scale>/<label>-<hash>, the seed being part of the hash), so a repeated command
skips finished runs, resumes interrupted ones, and a changed setting gets a fresh directory.
A tuned set's runs take the values `repro tune PAPER` chose (`repro.sweep.tuned`) after
their label's own overrides and before the command line's (`repro.claims.set_regime`, which
also tells a report whether a run is the set's).
"""

from __future__ import annotations

import copy

from repro.claims.set_regime import label_configs
from repro.config import Config, papers, set_scales
from repro.errors import UserError
from repro.track.naming import run_identity


def run_set(
    paper: str, scale: str, extra: list[str], seeds: int | None = None
) -> list[tuple[str, Config]]:
    """(name, config) of every run of `paper` at `scale`, each label for `seeds` seeds
    (default `experiment.seeds`), composed and validated up front. With one seed a run's
    name is its label; with several, its label and seed."""
    if paper not in papers():
        raise UserError(f"unknown paper {paper!r}; choose one of {papers()}")
    experiment = f"{paper}_{scale}"
    if scale not in set_scales(paper):
        raise UserError(
            f"scale={scale} does not exist for {paper}; choose one of {set_scales(paper)}"
        )
    composed = list(label_configs(experiment, extra).items())
    if not composed:
        raise UserError(f"experiment={experiment} lists no runs (experiment.runs is empty)")
    for label, cfg in composed:
        # a set copied from another paper's wrote its runs into that paper's group, where
        # that paper's report read them, and this one's found none
        made = (cfg.experiment.paper, cfg.experiment.scale, run_identity(cfg).group)
        if made != (paper, scale, experiment):
            raise UserError(
                f"experiment={experiment} makes its run {label} as paper {made[0]}, scale "
                f"{made[1]}, group {made[2]}, where {paper}'s report at {scale} does not look; "
                f"make it paper {paper}, scale {scale}, group {experiment} (experiment.paper, "
                f".scale, .group or tracking.group, in configs/experiment/{experiment}.yaml "
                "or the overrides)"
            )
    n = composed[0][1].experiment.seeds if seeds is None else seeds
    for _, cfg in composed:
        cfg.experiment.seeds = n  # what this set ran, recorded beside each run
    # seed by seed, so that a set stopped early has whole seeds to report
    runs = []
    for i in range(n):
        for label, cfg in composed:
            seeded = copy.deepcopy(cfg)
            seeded.seed = cfg.seed + i
            runs.append((label if n == 1 else f"{label} seed={seeded.seed}", seeded))
    return runs
