"""Calculators: how a claim's number is computed from the runs of one reproduction.

Each calculator is a plain function `(runs, **params) -> Measurement`, where `runs` maps a
run's label (`experiment.label`) to the run read back from disk. Claims files name a
calculator and its params; `CALCULATORS` is the registry they are looked up in. A calculator
raises `MissingRun` when a run it needs is absent and `NotMeasurable` when the runs lack a
metric or setting, so a claim can say "not run" and why instead of failing the report.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from repro.errors import UserError
from repro.netmodel.cost import Link, ring_allreduce, tree_allreduce
from repro.netmodel.schedule import gbps_to_Bps
from repro.report.series import (
    CLOCKS,
    MissingRun,
    NotMeasurable,
    Run,
    cfg,
    curve,
    final,
    final_step,
    first_reach,
    label_of,
    value_at_step,
    x_metric,
)


@dataclass(frozen=True)
class Measurement:
    """Our value for a claim (a number, `inf` for "never reached", or a bool) and how."""

    value: float | bool
    note: str = ""


Calculator = Callable[..., Measurement]
CALCULATORS: dict[str, Calculator] = {}


def calculator(name: str) -> Callable[[Calculator], Calculator]:
    """Register a calculator under the name claims files use."""

    def wrap(fn: Calculator) -> Calculator:
        CALCULATORS[name] = fn
        return fn

    return wrap


# Allowed values of the params that several calculators share; checked when a claims file is
# loaded, so that a typo fails there and not halfway through a report.
CHOICES = {
    "mode": ("min", "max"),
    "clock": tuple(CLOCKS),
    "direction": ("increasing", "decreasing"),
    "allreduce": ("ring", "tree"),
}


def check_params(name: str, params: Mapping[str, Any]) -> None:
    """UserError unless `params` fit calculator `name`'s signature and allowed values."""
    if name not in CALCULATORS:
        raise UserError(f"calculator '{name}' is not one of {sorted(CALCULATORS)}")
    try:
        inspect.signature(CALCULATORS[name]).bind({}, **params)
    except TypeError as err:
        raise UserError(f"params for '{name}': {err}") from None
    for key, allowed in CHOICES.items():
        if key in params and params[key] not in allowed:
            raise UserError(f"{key}={params[key]!r} must be one of {', '.join(allowed)}")
    if not isinstance(params.get("interpolate", False), bool):
        raise UserError(f"interpolate={params['interpolate']!r} must be true or false")
    smooth = params.get("smooth", 1)
    if isinstance(smooth, bool) or not isinstance(smooth, int) or smooth < 1:
        raise UserError(f"smooth={smooth!r} must be an integer >= 1")


def run_labelled(runs: Mapping[str, Run], label: str) -> Run:
    if label not in runs:
        raise MissingRun(f"no run labelled '{label}' (have: {', '.join(sorted(runs)) or 'none'})")
    return runs[label]


def _select(runs: Mapping[str, Run], where: Mapping[str, Any]) -> dict[str, Run]:
    """Runs whose config matches every `path: value` (or `path: [values]`) in `where`."""

    def ok(run: Run) -> bool:
        for path, want in where.items():
            allowed = want if isinstance(want, list) else [want]
            if cfg(run, path) not in allowed:
                return False
        return True

    return {label: run for label, run in runs.items() if ok(run)}


def _g(v: float) -> str:
    return "never" if math.isinf(v) else f"{v:.4g}"


def seconds_per_step(run: Run, clock: str = "modeled") -> float:
    """Mean seconds per step on a clock: the last logged time over the last logged step."""
    return final(run, x_metric(clock)) / final_step(run)


@calculator("final_metric")
def final_metric(runs: Mapping[str, Run], run: str, metric: str, smooth: int = 1) -> Measurement:
    """The last smoothed value of `metric` in run `run`."""
    value = final(run_labelled(runs, run), metric, smooth)
    return Measurement(value, f"mean of the last {smooth} points")


@calculator("metric_ratio")
def metric_ratio(
    runs: Mapping[str, Run], run: str, reference: str, metric: str, smooth: int = 1
) -> Measurement:
    """final(run) / final(reference) of one metric, both smoothed alike."""
    ours = final(run_labelled(runs, run), metric, smooth)
    ref = final(run_labelled(runs, reference), metric, smooth)
    if ref == 0:
        raise NotMeasurable(f"'{reference}' ends with {metric} = 0; the ratio is undefined")
    return Measurement(ours / ref, f"{run} {ours:.4g} / {reference} {ref:.4g}")


@calculator("time_to_target_ratio")
def time_to_target_ratio(
    runs: Mapping[str, Run],
    run: str,
    reference: str,
    metric: str = "train/loss",
    clock: str = "modeled",
    target: float | None = None,
    mode: str = "min",
    smooth: int = 1,
    interpolate: bool = False,
) -> Measurement:
    """Time for `run` to reach a target of `metric`, as a fraction of `reference`'s time.

    The target defaults to the reference's final smoothed value (AdaComm's headline: time to
    reach fully synchronous SGD's final training loss). Both times are the first logged
    point at which the smoothed curve reaches the target, on `clock` (modeled, wall or step);
    with `interpolate`, the point between the two logged points that bracket that crossing
    (`reach_interpolated`), so that the evaluation interval does not quantize the ratio.
    `inf` when `run` never reaches it. When the reference never reaches an explicit target,
    the claim "the reference gets there sooner" has failed, not gone unmeasured: 0 when
    `run` does reach it, NaN (outside every band) when neither does; the note says which.
    """
    reach = reach_interpolated if interpolate else first_reach
    rx, ry = curve(run_labelled(runs, run), metric, clock, smooth)
    fx, fy = curve(run_labelled(runs, reference), metric, clock, smooth)
    goal = fy[-1] if target is None else float(target)
    t_ref = reach(fx, fy, goal, mode)
    t_run = reach(rx, ry, goal, mode)
    if t_ref == 0:
        raise NotMeasurable(f"'{reference}' reaches {metric} {goal:.4g} at 0 on {clock}")
    if math.isinf(t_ref):
        reached = not math.isinf(t_run)
        got = f"{run} at {_g(t_run)}" if reached else f"nor does {run}"
        return Measurement(
            0.0 if reached else math.nan,
            f"{metric} {goal:.4g} never reached by {reference}; {got} ({clock} clock)",
        )
    note = f"{metric} {goal:.4g} reached by {run} at {_g(t_run)}, by {reference} at {t_ref:.4g}"
    how = ", interpolated between evaluations" if interpolate else ""
    return Measurement(t_run / t_ref, f"{note} ({clock} clock{how})")


@calculator("steps_to_target")
def steps_to_target(
    runs: Mapping[str, Run],
    run: str,
    metric: str,
    target: float,
    mode: str = "max",
    smooth: int = 1,
    interpolate: bool = False,
) -> Measurement:
    """The first logged step at which the smoothed `metric` reaches `target` (`inf`: never);
    with `interpolate`, the step between the two evaluations that bracket the crossing
    (`reach_interpolated`)."""
    xs, ys = curve(run_labelled(runs, run), metric, "step", smooth)
    step = (reach_interpolated if interpolate else first_reach)(xs, ys, float(target), mode)
    sign = ">=" if mode == "max" else "<="
    how = " (interpolated)" if interpolate else ""
    return Measurement(step, f"{metric} {sign} {target}: step {_g(step)}{how}")


def reach_interpolated(xs: Sequence[float], ys: Sequence[float], target: float, mode: str) -> float:
    """Where the curve through the logged points first reaches `target`: linear between the
    last point short of it (x0, y0) and the first that reaches it (x1, y1),
    x0 + (target - y0) / (y1 - y0) * (x1 - x0).

    A run evaluated every k steps stops at the first evaluation that reaches the target, so
    `first_reach` alone is up to k - 1 steps late; interpolating reads the crossing to the
    step (Adasum's steps-to-target claims, issue 14). When the first logged point already
    reaches the target there is no earlier point to interpolate from, and that point's x is
    returned, as `first_reach` does; `inf` when never reached.
    """
    at = first_reach(range(len(ys)), ys, target, mode)  # the index of the first point
    if math.isinf(at):
        return at
    i = int(at)
    if i == 0:
        return xs[0]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return x0 + (target - y0) / (y1 - y0) * (x1 - x0)


@calculator("monotone_decrease")
def monotone_decrease(runs: Mapping[str, Run], run: str, metric: str = "method/tau") -> Measurement:
    """The share of the changes of `metric` that are decreases; 0 unless it ends lower.

    1.0 means the metric only ever stepped down (AdaComm's tau as the loss falls).
    """
    _, ys = curve(run_labelled(runs, run), metric)
    changes = [b - a for a, b in zip(ys, ys[1:], strict=False) if b != a]
    downs = sum(1 for d in changes if d < 0)
    value = downs / len(changes) if changes and ys[-1] < ys[0] else 0.0
    note = f"{metric} {ys[0]:.4g} -> {ys[-1]:.4g}; {downs} of {len(changes)} changes are decreases"
    return Measurement(value, note)


def _members(
    runs: Mapping[str, Run],
    where: Mapping[str, Any],
    key: str,
    include: Mapping[str, float],
    minimum: int = 2,
) -> list[tuple[float, str, Run]]:
    """(key value, label, run) for the selected runs plus `include`d labels, sorted by key."""
    members = []
    for label, run in _select(runs, where).items():
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
    smoothed value at the last step every member reached (runs with a time budget end at
    different steps). The value is the share of consecutive pairs, ordered by `key`, that
    move strictly in `direction`.
    """
    members = _members(runs, where, key, include or {})
    if common_step:
        at = min(final_step(run) for _, _, run in members)
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
