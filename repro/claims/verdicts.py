"""Claims judged on the seeds' mean and its 95% bootstrap confidence interval.

A reproduction runs every label for several seeds; the report holds its runs as
label -> seed -> run (`Seeded`). A claim's calculator runs once per seed on that seed's runs
(label -> run); the claim's value is the mean of the per-seed values, and its 95%
percentile-bootstrap interval (`repro.claims.bootstrap`) says how far other seeds could move
that mean. An outcome claim's verdict places the interval against the band (or direction
rule) and the wider partly rule:

* "reproduced": the interval lies inside the band;
* "partly": outside the band and inside the partly rule;
* "not reproduced": outside the band and outside the partly rule (or there is none);
* "undecided at N seeds": it straddles an edge of either, and the claim's runs have fewer
  seeds than its cap, so seeds are added (`repro reproduce`); "inconclusive at N seeds,
  CI [a, b]" once they reach the cap. One seed has no interval: undecided (or inconclusive
  at a cap of 1);
* "not run" when a run a claim needs is absent for some seed, "not measured" when the runs
  lack a metric or setting, "not assessed" when the claim does not apply to the report's
  scale, or when a run it reads is not the run set's (`repro.claims.set_regime`: made with
  other settings than the set fixed for the claim); its values are still computed and shown.

A seed whose value is undefined (NaN: a ratio of two runs that both never reached the
target) lies outside every band, so the claim is not reproduced. A model check (it follows
from the modeled clock or the rule itself) is judged on every seed instead: its verdict is
its worst seed's, and it is never counted among the reproductions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from repro.claims.bootstrap import mean_interval
from repro.claims.claims_file import Claim
from repro.claims.reads import labels_made, labels_read, seeds_read, seeds_short
from repro.claims.result import ClaimResult, Interval
from repro.track.runs import unfinished
from repro.track.series import MissingRun, NotMeasurable, Seeded, any_seed, at_seed

ORDER = ("not reproduced", "partly", "reproduced")


def place(claim: Claim, low: float, high: float) -> tuple[str, float | None]:
    """The verdict of an interval against the band and partly rule, and the edge it
    straddles when undecided (see module doc)."""
    for rule, verdict in ((claim.reproduced, "reproduced"), (claim.partly, "partly")):
        if rule is None:
            return "not reproduced", None
        where = rule.place(low, high)
        if where == "inside":
            return verdict, None
        if where == "straddles":
            edge = next(e for e in rule.edges() if low <= e <= high)
            return "undecided", edge
    return "not reproduced", None


def judge(claim: Claim, values: dict[int, float]) -> tuple[str, Interval | None, float | None]:
    """An outcome claim's verdict from its per-seed values: (verdict, interval, edge)."""
    if any(math.isnan(v) for v in values.values()):
        return "not reproduced", None, None
    interval = mean_interval(list(values.values()))
    if interval is None:
        verdict, edge = "undecided", None
    else:
        verdict, edge = place(claim, interval.low, interval.high)
    if verdict == "undecided" and len(values) >= claim.cap:
        verdict = "inconclusive"
    return verdict, interval, edge


def _measure(claim: Claim, runs: Seeded, seeds: list[int]) -> tuple[dict[int, float], str]:
    """Each seed's value and the notes of how; MissingRun / NotMeasurable name the seed."""
    values: dict[int, float] = {}
    notes = []
    for seed in seeds:
        try:
            m = claim.measure(at_seed(runs, seed))
        except NotMeasurable as err:
            named = f"seed {seed}: {err}" if len(seeds) > 1 else str(err)
            raise type(err)(named) from None
        values[seed] = float(m.value)
        notes.append(f"seed {seed}: {m.note}" if len(seeds) > 1 else m.note)
    return values, "; ".join(notes)


def claim_seeds(claim: Claim, runs: Seeded) -> list[int]:
    """The seeds a claim is judged on: those at which every run it reads exists
    (`repro.claims.reads.seeds_read`)."""
    return seeds_read(claim.metric["calculator"], claim.metric.get("params") or {}, runs)


def left_out(claim: Claim, runs: Seeded, seeds: list[int]) -> str:
    """The seeds with runs of this claim that it is not judged on, and the runs they lack:
    said beside the value, so a run lost at a claim's last seed (which drops that seed, as
    seeds added to other claims' runs are dropped) is seen, not silently averaged away."""
    params = claim.metric.get("params") or {}
    lacking: dict[tuple[str, ...], list[str]] = {}
    for seed, labels in seeds_short(claim.metric["calculator"], params, runs).items():
        if seed not in seeds:
            lacking.setdefault(tuple(labels), []).append(str(seed))
    return "; ".join(
        f"seed{'s' if len(at) > 1 else ''} {', '.join(at)} not read: no {', '.join(labels)} "
        "run there"
        for labels, at in lacking.items()
    )


OffSet = Mapping[str, Mapping[int, list[str]]]
Made = Mapping[str, Mapping]
"""A run set's labels -> the settings that make each (`repro.claims.set_regime.set_settings`)."""


def departed(claim: Claim, runs: Seeded, seeds: list[int], off: OffSet) -> str:
    """The settings where the runs `claim` reads at `seeds` are not the run set's runs
    (`off`: label -> seed -> `repro.claims.set_regime.departures`), each once: "" when they all
    are."""
    params = claim.metric.get("params") or {}
    labels = labels_read(claim.metric["calculator"], params, any_seed(runs))
    found = [
        text
        for label in sorted(labels & set(off))
        for seed in seeds
        for text in off[label].get(seed, [])
    ]
    return "; ".join(dict.fromkeys(found))


def cut_short(claim: Claim, runs: Seeded, seeds: list[int]) -> str:
    """The runs `claim` reads at `seeds` that have not run to their end (`unfinished`), each
    with why: "" when none."""
    params = claim.metric.get("params") or {}
    labels = labels_read(claim.metric["calculator"], params, any_seed(runs))
    cut = unfinished({label: runs[label] for label in labels if label in runs})
    return ", ".join(
        f"{label} seed={seed} ({why})"
        for label, by_seed in sorted(cut.items())
        for seed, why in by_seed.items()
        if seed in seeds
    )


def rungs_missing(claim: Claim, runs: Seeded, scale: str, made: Made) -> list[str]:
    """The labels of the run set that the claim's selection (`pattern`, `where`) takes and
    that have no run, where others it takes have one: a ladder with a rung missing, which
    judged on the rungs there would be another claim. Where none of them has a run, the
    claim reads runs beside the set (a comparison of one's own) and is judged on those; a
    claim of another scale is judged on none, so it misses none."""
    if scale not in claim.scales:
        return []
    params = claim.metric.get("params") or {}
    takes = labels_made(claim.metric["calculator"], params, made)
    return sorted(takes - set(runs)) if takes & set(runs) else []


def _one(
    claim: Claim, runs: Seeded, scale: str, off: OffSet, made: Made, moved: dict[str, str]
) -> ClaimResult:
    if absent := rungs_missing(claim, runs, scale, made):
        missing = f"no {', '.join(absent)} run, which its run set makes"
        return ClaimResult(claim, None, "not run", missing)
    seeds = claim_seeds(claim, runs)
    if cut := cut_short(claim, runs, seeds):
        # a curve cut short would be judged as if whole: its last value, its time to a target
        note = f"runs it reads have not finished: {cut}"
        return ClaimResult(claim, None, "not assessed", note, unfinished=cut)
    try:
        values, note = _measure(claim, runs, seeds)
    except MissingRun as err:
        return ClaimResult(claim, None, "not run", str(err))
    except NotMeasurable as err:
        return ClaimResult(claim, None, "not measured", str(err))
    ours = sum(values.values()) / len(values)  # inf when a seed never reached a target
    if len(seeds) > 1:
        note = f"mean of {len(seeds)} seeds; {note}"
    if unread := left_out(claim, runs, seeds):
        note = f"{unread}; {note}"
    if scale not in claim.scales:
        note = f"applies to scale {', '.join(claim.scales)}, not {scale}; {note}"
        return ClaimResult(claim, ours, "not assessed", note, values)
    if away := departed(claim, runs, seeds, off):
        note = f"its runs are not the run set's ({away}); {note}"
        return ClaimResult(claim, ours, "not assessed", note, values, off_set=away)
    if shift := moved.get(claim.id):
        note = f"its terms moved after its runs began ({shift}); {note}"
        return ClaimResult(claim, ours, "not assessed", note, values, moved=shift)
    judged = {seed: claim.judge(value) for seed, value in values.items()}
    if claim.kind == "model_check":
        worst = min(judged.values(), key=ORDER.index)
        return ClaimResult(claim, ours, worst, note, values, judged)
    verdict, interval, edge = judge(claim, values)
    return ClaimResult(claim, ours, verdict, note, values, {}, interval, edge)


def magnitude_text(result: ClaimResult, by_id: dict[str, ClaimResult]) -> str:
    """What the claim's magnitude claims say where one of them is not reproduced; one not
    judged (a run or metric missing, or not the set's) says nothing of the magnitude."""
    failed = []
    for other in result.claim.magnitude:
        r = by_id[other]
        if r.verdict in ("reproduced", "not assessed", "not run", "not measured"):
            continue
        failed.append(
            f"{other} {r.verdict_text()}: {r.ours_text(r.claim.unit)}, band "
            f"{r.claim.reproduced.text()}"
        )
    return ("magnitude not reproduced: " + "; ".join(failed)) if failed else ""


def evaluate(
    claims: list[Claim],
    runs: Seeded,
    scale: str,
    off: OffSet | None = None,
    made: Made | None = None,
    moved: dict[str, str] | None = None,
) -> list[ClaimResult]:
    """Evaluate every claim on the runs of one reproduction at `scale` (never raises); a
    claim reading a run that `off` lists, one that has not run to its end, or one whose
    terms `moved` after its runs began (`repro.claims.fixed_terms`) is not assessed; one
    whose selection takes a run of its set (`made`, `labels_made`) that is missing is not
    run."""
    results = [_one(claim, runs, scale, off or {}, made or {}, moved or {}) for claim in claims]
    by_id = {r.claim.id: r for r in results}
    return [replace(r, magnitude=magnitude_text(r, by_id)) for r in results]


def outcomes(results: list[ClaimResult]) -> list[ClaimResult]:
    return [r for r in results if r.claim.kind == "outcome"]


def model_checks(results: list[ClaimResult]) -> list[ClaimResult]:
    return [r for r in results if r.claim.kind == "model_check"]


def summary(results: list[ClaimResult]) -> str:
    """ "2 reproduced, 1 undecided, ..." over the outcome claims, in the order the verdicts
    first appear; model checks are not claims reproduced."""
    verdicts = [r.verdict for r in outcomes(results)]
    return ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts)) or "none"


VERDICTS_TEXT = (
    "each outcome claim is judged on the mean of its seeds and that mean's 95% percentile-"
    "bootstrap confidence interval (10,000 resamples of the seeds; every seed's value is "
    "listed; the interval never leaves the seeds' range, and at 3 seeds it is the range, "
    "which holds the median of the distribution the seeds are drawn from 3 times in 4, so "
    "a verdict at few seeds is less sure than 95% says). "
    "reproduced: the interval lies inside the band (or direction rule); partly: "
    "outside it and inside the partly rule; not reproduced: outside both; undecided at N "
    "seeds: the interval straddles an edge, so seeds are added to that claim's runs up to "
    "the claim's seed cap, past which it is inconclusive at N seeds, with its interval; "
    "not run / not measured / not assessed: a run or metric is missing, or the claim is "
    "stated for another scale or read from runs the run set does not make (other settings) "
    "or that have not run to their end (killed, stopped), or its terms (band, published "
    "number, metric, seed cap) moved after its runs began (the set's claims_terms.json). "
    "Model checks (claims that follow from the modeled clock or the rule itself) are listed "
    "apart, judged on their worst seed, and not counted"
)
