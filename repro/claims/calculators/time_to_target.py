"""Calculators of when a run reaches a target value of a metric, and how that point is read.

`time_to_target_ratio` (AdaComm's headline: the time to reach fully synchronous SGD's final
loss, as a fraction of its time) and `steps_to_target` (Adasum's steps to a test accuracy)
take the first logged point at which a smoothed curve reaches the target; with `interpolate`,
`reach_interpolated` reads the crossing between the two logged points that bracket it, so
that the evaluation interval does not quantize the answer. Importing this module registers
the calculators.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from repro.claims.calculators.registry import Measurement, calculator, run_labelled
from repro.track.series import NotMeasurable, Run, curve, first_reach


def _g(v: float) -> str:
    return "never" if math.isinf(v) else f"{v:.4g}"


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
    ran = (
        f"reached by {run} at {t_run:.4g}," if math.isfinite(t_run) else f"never reached by {run};"
    )
    note = f"{metric} {goal:.4g} {ran} by {reference} at {t_ref:.4g}"
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
    step (Adasum's steps-to-target claims). When the first logged point already
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
