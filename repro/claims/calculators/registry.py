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
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
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
    hints = typing.get_type_hints(calculators[name])
    for key, value in params.items():
        if not _fits(value, hints.get(key, Any)):
            raise UserError(f"params for '{name}': {key}={value!r} must be {_kind(hints[key])}")
    if isinstance(params.get("pattern"), str):
        try:
            re.compile(params["pattern"])
        except re.error as err:
            raise UserError(f"params for '{name}': pattern={params['pattern']!r}: {err}") from None
    if params.get("smooth", 1) < 1:  # its type is the annotation's, checked above
        raise UserError(f"smooth={params['smooth']!r} must be an integer >= 1")


def _fits(value: Any, hint: Any) -> bool:
    """Whether a value read from YAML fits a calculator parameter's annotation (an int is a
    float; a bool is neither), so that a claims file's wrong type fails when it is loaded
    and not in a traceback after every run has finished."""
    if hint is Any:
        return True
    if isinstance(hint, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint in (int, float):
        return isinstance(value, hint | int) and not isinstance(value, bool)
    base = typing.get_origin(hint) or hint
    if base is Sequence:
        item = typing.get_args(hint)[0]
        return isinstance(value, list | tuple) and all(_fits(v, item) for v in value)
    return isinstance(value, base)


def _kind(hint: Any) -> str:
    """A parameter's annotation in a claims file's words."""
    words = {str: "a string", float: "a number", int: "a whole number", bool: "true or false"}
    if isinstance(hint, types.UnionType):
        return " or ".join(_kind(arm) for arm in typing.get_args(hint))
    base = typing.get_origin(hint) or hint
    if base is Sequence:
        return f"a list of {_kind(typing.get_args(hint)[0]).split(' ', 1)[1]}s"
    return {Mapping: "a mapping (key: value)", type(None): "null"}.get(base) or words[base]


def run_labelled(runs: Mapping[str, Run], label: str) -> Run:
    if label not in runs:
        raise MissingRun(f"no run labelled '{label}' (have: {', '.join(sorted(runs)) or 'none'})")
    return runs[label]


def seconds_per_step(run: Run, clock: str = "modeled") -> float:
    """Mean seconds per step on a clock: the last logged time over the last logged step."""
    return final(run, x_metric(clock)) / final_step(run)
