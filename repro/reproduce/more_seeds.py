"""Seeds added where a claim is undecided: `repro reproduce`'s step after the default seeds.

A claim whose 95% interval straddles a band edge is undecided (`repro.claims.verdicts`); more
seeds narrow the interval. After a set's default seeds have run here, the claims are
evaluated on the runs read back from disk, and for each outcome claim undecided below its
seed cap the next seed of only the runs that claim reads (`repro.claims.reads`) is run; this
repeats until every claim is decided or at its cap. Each addition is printed with its reason
(claim, interval, edge, seed). The loop starts from what exists, so a later `repro
reproduce` (for instance after a cluster's job array ended) continues it; with a cluster,
the added runs are submitted and the next `repro reproduce` goes on from them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

from repro.claims.claims_file import ClaimsFile
from repro.claims.fixed_terms import moved_for
from repro.claims.reads import labels_read
from repro.claims.result import ClaimResult
from repro.claims.set_regime import set_settings
from repro.claims.verdicts import evaluate
from repro.cluster.launcher import expected_time, launch_runs
from repro.config import Config, as_dict
from repro.pages.writer import counted, fmt
from repro.track.runs import find_runs
from repro.track.series import Seeded, any_seed, last_logged, seeds_of

Composed = Sequence[tuple[str, Config]]

RUN_START_S = 8.0
"""Seconds a run takes here outside its trainer's clock (`time/wall_s`): its process's
data, model and tracker set-up before the first step, the final model's and log's writes
after the last. Fitted to the added rounds of one `make reproduce-all` on the 2 cores, two
runs side by side: a round of Top-k or Adasum runs took 5-10 s a run more than the runs'
logged wall times."""


def _reads(claim, runs) -> set[str]:
    return labels_read(claim.metric["calculator"], claim.metric.get("params") or {}, runs)


def most_added(claims: ClaimsFile, runs: Composed, scale: str, minutes_per_run: float) -> str:
    """What the extension can add at most, for the expected-time line: every outcome claim
    of this scale undecided up to its cap, each label run to the largest cap of the claims
    that read it."""
    first: dict[str, Config] = {}
    for _, cfg in runs:
        first.setdefault(cfg.experiment.label, cfg)
    seeds = max(cfg.experiment.seeds for cfg in first.values())
    configs = {label: SimpleNamespace(config=as_dict(cfg)) for label, cfg in first.items()}
    cap: dict[str, int] = {}
    for claim in claims.claims:
        if claim.kind == "outcome" and scale in claim.scales:
            for label in _reads(claim, configs) & set(first):
                cap[label] = max(cap.get(label, 0), claim.cap)
    extra = [(label, first[label]) for label, c in cap.items() for _ in range(c - seeds)]
    if not extra:
        return "; no claim here can add seeds"
    if minutes_per_run <= 0:
        return f"; seeds added where a claim stays undecided: at most {len(extra)} more runs"
    line = expected_time(extra, minutes_per_run).removeprefix("expected time: ")
    return f"; seeds added where a claim stays undecided: at most {line}"


def measured_minutes(runs: Seeded) -> dict[str, float]:
    """Each label's minutes here, for the expected time of its next seed: the mean over its
    seeds of the last logged `time/wall_s`, plus `RUN_START_S`; a label without one is left
    out (the set's `experiment.expected_minutes` stands in)."""
    out = {}
    for label, by_seed in runs.items():
        ends = [last_logged(run, "time/wall_s") for run in by_seed.values()]
        walls = [w for w in ends if w is not None]
        if walls:
            out[label] = (sum(walls) / len(walls) + RUN_START_S) / 60
    return out


def wanted(results: list[ClaimResult], runs: Seeded) -> tuple[set[tuple[str, int]], list[str]]:
    """(label, seed) pairs to run next and why: the next seed of each undecided outcome
    claim's runs."""
    pairs: set[tuple[str, int]] = set()
    why = []
    labels_now = any_seed(runs)
    for r in results:
        if r.claim.kind != "outcome" or r.verdict != "undecided":
            continue
        seed = max(r.per_seed) + 1
        labels = sorted(_reads(r.claim, labels_now))
        pairs |= {(label, seed) for label in labels}
        where = f"95% CI {r.ci_text()} straddles {fmt(r.edge)}" if r.interval else "one seed"
        why.append(
            f"claim {r.claim.id}: {where} at {counted(r.seeds, 'seed')} "
            f"(cap {r.claim.cap}): adding seed {seed} of {', '.join(labels)}"
        )
    return pairs, why


def extend(
    paper: str,
    scale: str,
    claims: ClaimsFile,
    make: Callable[[int], Composed],
    root: Path,
    minutes_per_run: float,
) -> None:
    """Add seeds until every outcome claim is decided or at its cap. `make(n)` composes the
    set's runs for its first n seeds (`repro.reproduce.run_sets.run_set`)."""
    from repro.report.build import select_runs

    title = f"{paper} {scale}"
    tried: set[tuple[str, int]] = set()
    while True:
        found = find_runs(root) if root.is_dir() else []
        _, runs, _, off = select_runs(found, paper, scale, str(root))
        made = set_settings(f"{paper}_{scale}")
        results = evaluate(claims.claims, runs, scale, off, made, moved_for(claims.claims, runs))
        pairs, why = wanted(results, runs)
        if not pairs:
            return
        if pairs <= tried:  # the runs were made and the claim still cannot use them
            print(f"{title}: added runs did not complete a seed; stopping the extension")
            return
        tried |= pairs
        for line in why:
            print(f"{title}: {line}", flush=True)
        count = max(seed for _, seed in pairs) - min(seeds_of(runs)) + 1
        chosen = [
            (name, cfg) for name, cfg in make(count) if (cfg.experiment.label, cfg.seed) in pairs
        ]
        launched = launch_runs(
            chosen,
            f"{title} (added seeds)",
            minutes_per_run=minutes_per_run,
            measured=measured_minutes(runs),
            in_set=True,
        )
        if launched.jobs:
            print(f"{title}: run this repro reproduce command again once they end", flush=True)
            return
