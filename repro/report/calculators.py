"""Calculators: how a claim's number is computed from the runs of one reproduction.

Each calculator is a plain function `(runs, **params) -> Measurement`, where `runs` maps a
run's label (`experiment.label`) to the run read back from disk. Claims files name a
calculator and its params; `CALCULATORS` is the registry they are looked up in. A calculator
raises `MissingRun` when a run it needs is absent and `NotMeasurable` when the runs lack a
metric or setting, so a claim can say "not run" and why instead of failing the report.

This module holds the registry, the check of a calculator's params, and the calculators of
one run's final value or of two runs' ratio. The others live in `time_to_target`,
`by_setting` and `comparisons` and register themselves when imported, so a module that looks
a calculator up by name imports those too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from repro.errors import UserError
from repro.report.series import (
    CLOCKS,
    MissingRun,
    NotMeasurable,
    Run,
    curve,
    final,
    final_step,
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
