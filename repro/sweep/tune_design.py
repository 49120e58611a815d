"""The points a tuning search tries: a scrambled Sobol design mapped onto the search space.

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
same values (`repro.sweep.tune_spec.TuneSampler`).
"""

from __future__ import annotations

import math
from typing import Any

from repro.sweep.space import ParamSpec


def value_at(p: ParamSpec, u: float) -> Any:
    """The value of entry `p` at position u in [0, 1)."""
    if p.type == "categorical":
        return p.choices[min(int(u * len(p.choices)), len(p.choices) - 1)]
    if p.type == "int":
        step = p.step or 1
        count = (p.high - p.low) // step + 1
        if p.log:  # cells of equal width in log space over [low, high + 1)
            v = math.floor(math.exp(math.log(p.low) + u * math.log((p.high + 1) / p.low)))
            return int(min(max(v, p.low), p.high))
        return int(p.low + step * min(int(u * count), count - 1))
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
