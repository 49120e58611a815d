"""The run labels a claim reads, derived from its calculator's params.

Seeds are added to an undecided claim's runs only (`repro.reproduce.more_seeds`), and a claim
is judged on the seeds at which every run it reads exists (`repro.claims.verdicts`), so both
need the labels a calculator will look at without running it. Calculators name their runs
by a few params, whatever the calculator: `run` and `reference` (one label each),
`pattern` (a regular expression over whole labels), `families` with `mild` and `harsh`
(labels `<family><mild>` and `<family><harsh>`), `where` (runs whose config matches) and
`include` (labels added to a `where` selection), each given or the calculator's default. A
test checks, for every registered calculator, that these are exactly the labels whose
metrics it reads.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from repro.claims.calculators.by_setting import select_where, where_matches
from repro.claims.calculators.registry import registered
from repro.errors import UserError
from repro.track.series import Run, Seeded, any_seed, seeds_of

if TYPE_CHECKING:
    from repro.claims.claims_file import Claim


def labels_read(calculator: str, given: Mapping[str, Any], runs: Mapping[str, Run]) -> set[str]:
    """The labels `calculator` with params `given` (its defaults filling the rest) reads
    among `runs` (label -> a run of that label, for its config), plus the labels it names
    that have no run yet."""
    params = _params(calculator, given)
    labels = {str(params[key]) for key in ("run", "reference") if key in params}
    if "pattern" in params:
        labels |= {label for label in runs if re.fullmatch(params["pattern"], label)}
    for family in params.get("families") or []:
        labels |= {f"{family}{params['mild']}", f"{family}{params['harsh']}"}
    if "where" in params:
        labels |= set(select_where(runs, params["where"]))
    labels |= set(params.get("include") or {})
    return labels


def labels_made(calculator: str, given: Mapping[str, Any], made: Mapping[str, Mapping]) -> set[str]:
    """The labels of a run set (`made`: label -> the settings, dotted keys, that make its
    run: `repro.claims.set_regime.set_settings`) that a selection by `pattern` or `where`
    takes: what the claim reads where every run of the set exists. Judged on the runs that
    do, a claim over the tau ladder with one rung missing was judged on the others."""
    params = _params(calculator, given)
    labels = set()
    if "pattern" in params:
        labels |= {label for label in made if re.fullmatch(params["pattern"], label)}
    if "where" in params:
        where = params["where"]
        labels |= {label for label, got in made.items() if where_matches(got.get, where)}
    return labels


def _params(calculator: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """A calculator's params: its defaults, then those `given`."""
    signature = inspect.signature(registered()[calculator]).parameters.values()
    params = {p.name: p.default for p in signature if p.default is not inspect.Parameter.empty}
    return {**params, **given}


def seeds_read(calculator: str, params: Mapping[str, Any], runs: Seeded) -> list[int]:
    """The seeds a calculation is made at: those at which every run it reads exists. Seeds
    added to other claims' runs, past its last complete seed, are left out; a seed short of
    a run below that is kept, so that the calculation says which run is missing."""
    read, lacking = _lacking(calculator, params, runs)
    complete = [seed for seed, labels in lacking.items() if not labels]
    partial = list(_short(read, lacking))
    if not complete:
        return partial or seeds_of(runs) or [0]
    return sorted(complete + [seed for seed in partial if seed < complete[-1]])


def seeds_short(calculator: str, params: Mapping[str, Any], runs: Seeded) -> dict[int, list[str]]:
    """Seed -> the labels the calculation reads that have no run at it, for every seed at
    which some of them have one: where a run is missing, or seeds were added to other
    claims' runs (which of the two, the runs cannot say; a page shows both)."""
    return _short(*_lacking(calculator, params, runs))


def _lacking(
    calculator: str, params: Mapping[str, Any], runs: Seeded
) -> tuple[int, dict[int, list[str]]]:
    """How many labels the calculation reads, and seed -> those with no run at that seed."""
    labels = sorted(labels_read(calculator, params, any_seed(runs)))
    lacking = {
        seed: [lb for lb in labels if seed not in runs.get(lb, {})] for seed in seeds_of(runs)
    }
    return len(labels), lacking


def _short(read: int, lacking: dict[int, list[str]]) -> dict[int, list[str]]:
    """The seeds at which some, not all, of the `read` labels lack a run."""
    return {seed: labels for seed, labels in lacking.items() if 0 < len(labels) < read}


def check_labels_made(
    claims: Sequence[Claim], scale: str, made: Collection[str], experiment: str, path: str
) -> None:
    """Refuse a claim of `scale` that names a run label (`run`, `reference`, `families`,
    `include`) the run set `experiment` does not make: its report could only say the run is
    missing, after every other run of the set. Selections by `pattern` or `where` match
    whatever runs exist, so they are judged on the runs."""
    for claim in claims:
        if scale not in claim.scales:
            continue
        named = labels_read(claim.metric["calculator"], claim.metric.get("params") or {}, {})
        if lacking := sorted(named - set(made)):
            raise UserError(
                f"{path}: claim '{claim.id}' reads {', '.join(lacking)}, which run set "
                f"{experiment} does not make (it makes {', '.join(sorted(made))}); name its "
                f"runs among those, or add them to configs/experiment/{experiment}.yaml"
            )
