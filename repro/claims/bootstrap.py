"""The 95% percentile-bootstrap confidence interval of a mean over seeds.

A claim's value is the mean of its per-seed values; how far that mean could move with other
seeds is read from the mean's bootstrap distribution (Efron's percentile interval, as
recommended for reporting results over seeds by Agarwal et al., NeurIPS 2021, and
Bouthillier et al., MLSys 2021): draw `resamples` samples of the seeds' values with
replacement, take each sample's mean, and report the 2.5th and 97.5th percentiles of those
means, interpolated linearly between order statistics as numpy's and scipy's `percentile`
do. The generator is seeded, so a report built twice from the same runs says the same.

At few seeds the level is nominal. A resample's mean never leaves the seeds' range, and at 3
seeds a resample of one seed thrice (probability 1/27 each, above the 2.5% tail) puts the
interval's ends on the least and the greatest value: the interval is the range. The range
of n independent draws misses the median of their distribution only when all n fall on one
side of it, so it holds it with probability 1 - 2^(1 - n) whatever the distribution: 75% at
3 seeds (at 5, 94%, and the interval, narrower than the range, less). The method is the
one the claims were fixed with (and the seed caps add seeds where an interval straddles an
edge); the reports' rule text says this beside it.

Values may be infinite ("never reached a target"): a resample holding one has an infinite
mean, so an interval can end at inf, and a claim whose band it must lie inside is then
undecided or failed rather than averaged into a finite number. A single seed has no spread to
resample: its interval is None (see `repro.claims.verdicts` for what the verdict says).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from repro.claims.result import Interval

if TYPE_CHECKING:
    import numpy as np

LEVEL = 0.95
RESAMPLES = 10_000
RNG_SEED = 20_211_206  # fixed, so that a report repeats; any value would do


def _percentile(ordered: np.ndarray, q: float) -> float:
    """The q-quantile (0..1) of sorted values, linear between neighbours (numpy's default
    'linear' method), where a neighbour that is infinite wins instead of giving inf - inf."""
    pos = q * (len(ordered) - 1)
    i = math.floor(pos)
    frac = pos - i
    lo = float(ordered[i])
    if frac == 0 or i + 1 >= len(ordered):
        return lo
    hi = float(ordered[i + 1])
    if lo == hi:
        return lo
    if math.isinf(lo) or math.isinf(hi):
        return hi if math.isinf(hi) else lo
    return lo + (hi - lo) * frac


def mean_interval(
    values: Sequence[float],
    *,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = RNG_SEED,
) -> Interval | None:
    """The mean of `values` and its `level` percentile-bootstrap interval; None for fewer
    than two values. Values must not be NaN (a NaN seed has no place on the line)."""
    # numpy loads here, not with the module: a report refused for bad input never needs it
    import numpy as np

    data = np.asarray(values, dtype=float)
    if np.isnan(data).any():
        raise ValueError("the bootstrap of a mean needs values that are not NaN")
    # a mean lies between the least and the greatest value; clipping keeps float rounding
    # from moving the mean of equal values past a band edge they sit on
    low, high = data.min(), data.max()
    with np.errstate(invalid="ignore"):  # +inf and -inf in one resample: NaN, sorted last
        mean = float(np.clip(np.mean(data), low, high))
        if len(data) < 2:
            return None
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, len(data), size=(resamples, len(data)))
        means = np.sort(np.clip(data[picks].mean(axis=1), low, high))
    tail = (1 - level) / 2
    return Interval(mean, _percentile(means, tail), _percentile(means, 1 - tail))
