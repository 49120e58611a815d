"""Search-space entries of a sweep spec: one Optuna distribution bound to one config key.

Each entry is checked as Optuna would check the distribution (bounds, log scale, step,
choices), so a bad entry is refused when the spec is read instead of when the first trial
samples it. `format_override` turns a sampled value back into the Hydra override that sets it.

A tuning search tries fixed points of its space, not a sampler's picks (`design`):
`design(space, n, seed)` draws the first n points (n a power of 2) of scipy's scrambled Sobol
sequence in [0, 1)^d, d the number of entries. Those points are a net: along each coordinate
exactly one point falls in each of the n cells [k/n, (k+1)/n). Each coordinate is then moved
to the centre of its cell, so that in one dimension the design is the even grid of n cell
midpoints (a scrambled point may sit anywhere in its cell, which left a factor-3 gap in the
learning rate between neighbours at n = 8), and in two or more a Latin hypercube that keeps
Sobol's balance. Each coordinate maps onto its entry uniformly in log space for a log range
(the learning rate), linearly otherwise; an integer range is split into cells of equal width,
one per integer (in log space for a log range); a categorical entry into one per choice. The
same space, n and seed give the same points, so two arms that share a space are tried at the
same values (`repro.sweep.spec.SamplerSpec`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from repro.errors import UserError
from repro.override_quoting import quoted

PARAM_TYPES = ("float", "int", "categorical")


def number(value: Any, what: str) -> float:
    """`value` as a finite number, or a `UserError` naming the setting `what`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UserError(f"{what}={value!r} must be a finite number")
    return value


@dataclass(frozen=True)
class ParamSpec:
    """One search-space entry: an Optuna distribution bound to a config key."""

    key: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        where = f"space[{self.key}]"
        if not self.key:
            raise UserError(f"space entry key={self.key!r} must be a config key such as method.cr")
        if self.type not in PARAM_TYPES:
            raise UserError(f"{where}.type={self.type!r} must be one of {', '.join(PARAM_TYPES)}")
        if self.type == "categorical":
            self._check_categorical(where)
        else:
            self._check_numeric(where)

    def _check_categorical(self, where: str) -> None:
        if self.low is not None or self.high is not None or self.log or self.step is not None:
            raise UserError(f"{where}: a categorical entry takes choices, not low/high/log/step")
        if not self.choices:
            raise UserError(f"{where}.choices is empty: list at least one value")
        for c in self.choices:
            if c is not None and not isinstance(c, bool | int | float | str):
                raise UserError(f"{where}.choices: {c!r} is not a scalar (str, number, bool)")
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise UserError(f"{where}.choices={list(self.choices)} has duplicates")

    def _check_numeric(self, where: str) -> None:
        if self.choices:
            raise UserError(f"{where}: a {self.type} entry takes low/high, not choices")
        if self.low is None or self.high is None:
            raise UserError(f"{where}: a {self.type} entry needs both low and high")
        low, high = number(self.low, f"{where}.low"), number(self.high, f"{where}.high")
        if self.type == "int":
            for name, v in (("low", low), ("high", high), ("step", self.step)):
                if v is not None and not isinstance(v, int):
                    raise UserError(f"{where}.{name}={v!r} must be an integer for type int")
        if low >= high:
            raise UserError(f"{where}: low={low} must be below high={high}")
        if self.log and low <= 0:
            raise UserError(f"{where}: log scale needs low > 0, got low={low}")
        if self.step is not None:
            step = number(self.step, f"{where}.step")
            if step <= 0:
                raise UserError(f"{where}.step={step} must be positive")
            if self.log:
                raise UserError(f"{where}: log and step cannot be combined (Optuna refuses it)")

    def probe_values(self) -> list[Any]:
        """Values that exercise the config schema: every choice, or both ends of the range,
        as the sampler draws them (a float range written with whole ends draws floats)."""
        if self.type == "categorical":
            return list(self.choices)
        ends = [self.low, self.high]
        return [float(v) for v in ends] if self.type == "float" else ends

    def grid_values(self) -> list[Any]:
        """The points a grid sampler visits; a float without a step has none."""
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "float" and self.step is None:
            raise UserError(f"sampler grid needs space[{self.key}].step (or make it categorical)")
        step = self.step if self.step is not None else 1
        n = int(math.floor((self.high - self.low) / step + 1e-9)) + 1
        return [self.low + i * step for i in range(n)]


def grid_size(space: tuple[ParamSpec, ...]) -> int:
    """Number of points a grid sampler visits: the product of each entry's grid."""
    return math.prod(len(p.grid_values()) for p in space)


def format_override(key: str, value: Any) -> str:
    """A Hydra override for one sampled value; a string is quoted unless it is a plain word
    that Hydra reads back as that string."""
    if value is None:
        return f"{key}=null"
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    if isinstance(value, str):  # `null`, `true` or `1e-3` bare would read as another type
        return quoted(key, value, always=not re.fullmatch(r"[A-Za-z0-9_./-]+", value))
    return f"{key}={value!r}" if isinstance(value, float) else f"{key}={value}"


def shown(value: Any) -> str:
    """A value as a progress line or a table shows it: a float to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def shown_settings(values: dict[str, Any]) -> str:
    """`key=value, ...`, each value `shown`: a trial's point or its objectives on one line."""
    return ", ".join(f"{k}={shown(v)}" for k, v in values.items())


def suggest(trial: Any, p: ParamSpec) -> Any:
    """Draw one search-space entry through the trial (its sampler picks the value)."""
    if p.type == "categorical":
        return trial.suggest_categorical(p.key, list(p.choices))
    if p.type == "int":
        return trial.suggest_int(p.key, p.low, p.high, step=p.step or 1, log=p.log)
    return trial.suggest_float(p.key, p.low, p.high, step=p.step, log=p.log)


def value_at(p: ParamSpec, u: float) -> Any:
    """The value of entry `p` at position u in [0, 1)."""
    if p.type == "categorical" or (p.type == "int" and not p.log):  # a cell per grid point
        # an int's grid as a range, not `grid_values`' list: a design of 64 points on an entry
        # of a million integers listed them all 64 times (2.5 s and 40 MB at a time)
        values = p.choices if p.type == "categorical" else range(p.low, p.high + 1, p.step or 1)
        return values[min(int(u * len(values)), len(values) - 1)]
    if p.type == "int":  # cells of equal width in log space over [low, high + 1)
        v = math.floor(math.exp(math.log(p.low) + u * math.log((p.high + 1) / p.low)))
        return int(min(max(v, p.low), p.high))
    if p.log:
        v = math.exp(math.log(p.low) + u * (math.log(p.high) - math.log(p.low)))
    else:
        v = p.low + u * (p.high - p.low)
        if p.step is not None:
            v = p.low + round((v - p.low) / p.step) * p.step
    return float(min(max(v, p.low), p.high))


def design(space: tuple[ParamSpec, ...], n: int, seed: int) -> list[dict[str, Any]]:
    """n points of the space, in the order the trials take them."""
    import numpy as np
    from scipy.stats import qmc

    units = qmc.Sobol(d=len(space), scramble=True, seed=seed).random(n)
    units = (np.floor(units * n) + 0.5) / n  # each coordinate at the centre of its cell
    return [
        {p.key: value_at(p, float(u)) for p, u in zip(space, row, strict=True)} for row in units
    ]
