"""Calculators that compare the runs of a set against a reference run, or per network phase.

They serve claims such as Flexible Top-k's (Tyagi & Swany 2023): compressed runs step faster
than DenseSGD (Table IV), lose little accuracy at a mild ratio and more at a harsh one, the
multi-objective controller keeps its ratio in a band, and the collective switch picks AR-Topk
in some network phases and allgather in others (Sec. IV). Runs are picked by a regular
expression over their labels (`pattern`, matched against the whole label), so a claims file
names a family of runs (`(ag|star|var)_topk_c.*`) without listing every ratio.

Importing this module registers the calculators under the names below.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from repro.claims.calculators.registry import (
    Measurement,
    calculator,
    run_labelled,
    seconds_per_step,
)
from repro.track.series import MissingRun, NotMeasurable, Run, cfg, final, points


def matching(runs: Mapping[str, Run], pattern: str) -> dict[str, Run]:
    """The runs whose label matches `pattern` as a whole; MissingRun when there are none."""
    chosen = {label: run for label, run in runs.items() if re.fullmatch(pattern, label)}
    if not chosen:
        raise MissingRun(f"no run label matches '{pattern}' (have: {', '.join(sorted(runs))})")
    return chosen


@calculator("step_time_ratio")
def step_time_ratio(
    runs: Mapping[str, Run], pattern: str, reference: str, clock: str = "modeled"
) -> Measurement:
    """The largest (seconds per step of a run) / (seconds per step of `reference`).

    Per step = last logged time over last logged step, so any probing a run does is paid
    for in its mean. Below 1 means every selected run steps faster than the reference.
    """
    ref = seconds_per_step(run_labelled(runs, reference), clock)
    chosen = matching(runs, pattern)
    ratios = {label: seconds_per_step(run, clock) / ref for label, run in chosen.items()}
    note = f"{reference} {ref * 1e3:.4g} ms/step; " + ", ".join(
        f"{label} {r:.3g}x" for label, r in ratios.items()
    )
    return Measurement(max(ratios.values()), f"{note} ({clock} clock)")


def accuracy_drops(
    runs: Mapping[str, Run], pattern: str, reference: str, metric: str, smooth: int
) -> dict[str, float]:
    """Percentage points each matching run ends below `reference` on `metric` (a fraction)."""
    ref = final(run_labelled(runs, reference), metric, smooth)
    return {
        label: 100 * (ref - final(run, metric, smooth))
        for label, run in matching(runs, pattern).items()
    }


@calculator("accuracy_drop")
def accuracy_drop(
    runs: Mapping[str, Run],
    pattern: str,
    reference: str,
    metric: str = "test/acc",
    smooth: int = 1,
) -> Measurement:
    """The largest drop, in percentage points, of a matching run's final `metric` below the
    reference's (negative when every matching run ends above it)."""
    drops = accuracy_drops(runs, pattern, reference, metric, smooth)
    note = ", ".join(f"{label} {d:+.3g} pt" for label, d in drops.items())
    return Measurement(max(drops.values()), f"{metric} below {reference}: {note}")


@calculator("drop_grows")
def drop_grows(
    runs: Mapping[str, Run],
    families: Sequence[str],
    mild: str,
    harsh: str,
    reference: str,
    metric: str = "test/acc",
    smooth: int = 1,
) -> Measurement:
    """The share of `families` whose accuracy drop below `reference` is larger at the harsh
    setting than at the mild one; labels are `<family><mild>` and `<family><harsh>`."""
    if not families:
        raise NotMeasurable("drop_grows needs at least one family")
    grows, parts = 0, []
    for family in families:
        labels = [f"{family}{mild}", f"{family}{harsh}"]
        pattern = "|".join(re.escape(label) for label in labels)
        drops = accuracy_drops(runs, pattern, reference, metric, smooth)
        missing = [label for label in labels if label not in drops]
        if missing:
            raise MissingRun(f"no run labelled '{missing[0]}'")
        low, high = (drops[label] for label in labels)
        grows += high > low
        parts.append(f"{family}: {low:+.3g} -> {high:+.3g} pt")
    return Measurement(grows / len(families), "; ".join(parts))


@calculator("share_in_range")
def share_in_range(
    runs: Mapping[str, Run], run: str, metric: str, low: float, high: float
) -> Measurement:
    """The share of a run's logged points whose `metric` lies in [low, high]."""
    _, ys = points(run_labelled(runs, run), metric)
    if not ys:
        raise NotMeasurable(f"run '{run}' logged no '{metric}'")
    values = [float(y) for y in ys]
    inside = sum(low <= y <= high for y in values)
    spread = f"min {min(values):.3g}, max {max(values):.3g}"
    return Measurement(inside / len(values), f"{inside} of {len(values)} points; {spread}")


def phase_of(run: Run, epoch: float) -> int:
    """Index of the network phase of the run's schedule in force at `epoch` (0 without one)."""
    starts = [float(p["from_epoch"]) for p in cfg(run, "network.schedule", None) or []]
    return max((i for i, start in enumerate(starts) if epoch >= start), default=0)


def dominant_by_phase(run: Run, metric: str) -> dict[int, str]:
    """Per network phase, the most often logged value of `metric` (a categorical metric such
    as the chosen collective); phases without a logged point are absent."""
    epochs, values = points(run, metric, "epoch")
    counts: dict[int, Counter] = {}
    for epoch, value in zip(epochs, values, strict=True):
        counts.setdefault(phase_of(run, epoch), Counter())[str(value)] += 1
    return {phase: c.most_common(1)[0][0] for phase, c in sorted(counts.items())}


@calculator("choice_by_phase")
def choice_by_phase(
    runs: Mapping[str, Run],
    pattern: str,
    phases: Sequence[int],
    allowed: Sequence[str],
    metric: str = "method/collective",
) -> Measurement:
    """The share of (matching run, phase) pairs whose dominant logged `metric` in that phase
    of the network schedule is one of `allowed` (e.g. AR-Topk in the 1 Gbit/s phase)."""
    hits, total, parts = 0, 0, []
    for label, run in matching(runs, pattern).items():
        dominant = dominant_by_phase(run, metric)
        for phase in phases:
            if phase not in dominant:
                raise NotMeasurable(f"run '{label}' logged no '{metric}' in network phase {phase}")
            total += 1
            hits += dominant[phase] in allowed
            parts.append(f"{label} phase {phase}: {dominant[phase]}")
    return Measurement(hits / total, "; ".join(parts))
