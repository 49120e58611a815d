"""Calculators: how a claim's number is computed from the runs of one reproduction.

Each calculator is a plain function `(runs, **params) -> Measurement`, where `runs` maps a
run's label (`experiment.label`) to the run read back from disk. Claims files name a
calculator and its params; `registered()` is the registry they are looked up in. A
calculator raises `MissingRun` when a run it needs is absent and `NotMeasurable` when the
runs lack a metric or setting, so a claim can say "not run" and why instead of failing the
report.

This module holds the registry, the check of a calculator's params and the helpers the
calculators share. The calculators live in the other modules of `repro.claims.calculators`
and register themselves when imported; `registered()` imports every module of the package,
as `repro.strategies.base.registered` does for the methods, so adding a calculator is adding
a module and nothing lists them.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from repro.errors import UserError
from repro.track.series import CLOCKS, MissingRun, Run, final, final_step, x_metric


@dataclass(frozen=True)
class Measurement:
    """Our value for a claim (a number, `inf` for "never reached", or a bool) and how."""

    value: float | bool
    note: str = ""


Calculator = Callable[..., Measurement]
_REGISTRY: dict[str, Calculator] = {}


def calculator(name: str) -> Callable[[Calculator], Calculator]:
    """Register a calculator under the name claims files use."""

    def wrap(fn: Calculator) -> Calculator:
        _REGISTRY[name] = fn
        return fn

    return wrap


def registered() -> dict[str, Calculator]:
    """Every calculator by name, discovered by importing each module of
    `repro.claims.calculators` (a module registers its calculators when imported)."""
    import repro.claims.calculators as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    return dict(_REGISTRY)


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
    calculators = registered()
    if name not in calculators:
        raise UserError(f"calculator '{name}' is not one of {sorted(calculators)}")
    try:
        inspect.signature(calculators[name]).bind({}, **params)
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
