"""Calculators over runs that differ in one config setting, such as AdaComm's tau.

A claims file picks the runs by their config (`where`, plus `include`d labels such as sync
as tau 1) and names the setting (`key`) that orders them. `trend` is the share of
consecutive runs along the setting whose metric moves in the stated direction (larger tau:
faster steps, worse final loss); `speedup_vs_bound` checks each run's measured speedup
against AdaComm's runtime bound, with the communication time per step modeled by
`comm_seconds_per_step`. Importing this module registers the calculators.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from repro.claims.calculators.registry import (
    Measurement,
    calculator,
    run_labelled,
    seconds_per_step,
)
from repro.netmodel.cost import Link, ring_allreduce, tree_allreduce
from repro.netmodel.schedule import gbps_to_Bps
from repro.track.series import (
    MissingRun,
    NotMeasurable,
    Run,
    cfg,
    final,
    final_step,
    label_of,
    points,
    value_at_step,
)


def where_matches(value_at: Callable[[str], Any], where: Mapping[str, Any]) -> bool:
    """Whether the settings `value_at(path)` reads match every `path: value` (or
    `path: [values]`) in `where`: a run's config, or a run set's label before its run."""
    return all(
        value_at(path) in (want if isinstance(want, list) else [want])
        for path, want in where.items()
    )


def select_where(runs: Mapping[str, Run], where: Mapping[str, Any]) -> dict[str, Run]:
    """Runs whose config matches every `path: value` (or `path: [values]`) in `where`."""
    return {
        label: run
        for label, run in runs.items()
        if where_matches(lambda path, run=run: cfg(run, path), where)
    }


def _members(
    runs: Mapping[str, Run],
    where: Mapping[str, Any],
    key: str,
    include: Mapping[str, float],
    minimum: int = 2,
) -> list[tuple[float, str, Run]]:
    """(key value, label, run) for the selected runs plus `include`d labels, sorted by key."""
    members = []
    for label, run in select_where(runs, where).items():
        value = cfg(run, key)
        if value is None:
            raise NotMeasurable(f"run '{label}' has no config '{key}'")
        members.append((float(value), label, run))
    members += [(float(v), label, run_labelled(runs, label)) for label, v in include.items()]
    if len(members) < minimum:
        raise MissingRun(f"needs at least {minimum} runs with {dict(where)} (found {len(members)})")
    return sorted(members, key=lambda m: m[0])


@calculator("trend")
def trend(
    runs: Mapping[str, Run],
    where: Mapping[str, Any],
    key: str,
    metric: str,
    direction: str,
    per_step: bool = False,
    smooth: int = 1,
    include: Mapping[str, float] | None = None,
    common_step: bool = False,
) -> Measurement:
    """How consistently `metric` moves in `direction` as config `key` grows across runs.

    Runs are those matching `where` plus `include` (label -> key value, e.g. sync as tau 1).
    Per run the quantity is the final smoothed `metric`, or with `per_step` its final value
    divided by the final step (e.g. modeled seconds per step), or with `common_step` its
    smoothed value at the last step at which every member logged it (runs with a time budget
    end at different steps, off their evaluation grid: the shortest run's own last step was
    read against the others' last point before it, a different step and window). The value
    is the share of consecutive pairs, ordered by `key`, that move strictly in `direction`.
    """
    members = _members(runs, where, key, include or {})
    if common_step:
        shared = set.intersection(*(set(points(run, metric)[0]) for _, _, run in members))
        if not shared:
            raise NotMeasurable(f"no step at which every run logged '{metric}'")
        at = max(shared)
        ys = [value_at_step(run, metric, at, smooth) for _, _, run in members]
    else:
        ys = [
            final(run, metric) / final_step(run) if per_step else final(run, metric, smooth)
            for _, _, run in members
        ]
    sign = 1 if direction == "increasing" else -1
    good = sum(1 for a, b in zip(ys, ys[1:], strict=False) if sign * (b - a) > 0)
    name = key.rsplit(".", 1)[-1]
    note = ", ".join(f"{name}={k:g}: {y:.4g}" for (k, _, _), y in zip(members, ys, strict=True))
    if common_step:
        note += f" (at step {at:g})"
    return Measurement(good / (len(ys) - 1), note)


def comm_seconds_per_step(run: Run, algo: str = "ring") -> float:
    """Modeled communication time D per step of a run: its allreduces on its network.

    From the logged totals: c collectives of mean payload M = bytes / c (scaled by
    `network.bytes_scale`, as the modeled clock does) over S steps. The alpha-beta cost is
    affine in M, so c / S collectives of M bytes cost exactly what the run's collectives
    cost per step, whether it sends one flattened allreduce or one per tensor.
    """
    settings = {}
    for path in ("trainer.world_size", "network.latency_ms", "network.bandwidth_gbps"):
        settings[path] = cfg(run, path)
        if settings[path] is None:
            raise NotMeasurable(f"run config has no '{path}'")
    formula = {"ring": ring_allreduce, "tree": tree_allreduce}[algo]
    collectives = final(run, "comm/collectives")
    if collectives <= 0:
        raise NotMeasurable(f"run '{label_of(run)}' logged no collectives")
    link = Link(
        float(settings["network.latency_ms"]) / 1e3,
        gbps_to_Bps(float(settings["network.bandwidth_gbps"])),
    )
    m = final(run, "comm/bytes") / collectives * float(cfg(run, "network.bytes_scale", 1.0))
    per_collective = formula(link, m, int(settings["trainer.world_size"]))
    return collectives / final_step(run) * per_collective


@calculator("speedup_vs_bound")
def speedup_vs_bound(
    runs: Mapping[str, Run],
    where: Mapping[str, Any],
    reference: str = "sync",
    key: str = "method.tau",
    allreduce: str = "ring",
) -> Measurement:
    """min over fixed-tau runs of measured speedup per step / (1 + a) / (1 + a / tau).

    AdaComm's runtime analysis: with a = E[D] / E[Y_m:m], PASGD's speedup over fully
    synchronous SGD is at least (1 + a)/(1 + a/tau). D is the reference's modeled
    communication time per step and E[Y_m:m] the rest of its modeled step time; measured
    speedup = sync's modeled seconds per step / the run's. A value >= 1 means every run
    meets the bound.
    """
    ref = run_labelled(runs, reference)
    s_sync = seconds_per_step(ref)
    d = comm_seconds_per_step(ref, allreduce)
    if s_sync <= d:
        raise NotMeasurable(f"'{reference}' step {s_sync:.4g} s is not longer than D {d:.4g} s")
    a = d / (s_sync - d)
    members = _members(runs, where, key, {}, minimum=1)
    parts, ratios = [], []
    for tau, _, run in members:
        measured = s_sync / seconds_per_step(run)
        bound = (1 + a) / (1 + a / tau)
        ratios.append(measured / bound)
        parts.append(f"tau={tau:g}: {measured:.3g}x vs bound {bound:.3g}x")
    return Measurement(min(ratios), f"a={a:.3g} (D={d:.4g} s); " + "; ".join(parts))
