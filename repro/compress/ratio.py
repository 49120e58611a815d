"""Compression-ratio controllers: a fixed ratio, or Flexible Top-k's multi-objective choice.

Flexible Top-k (Tyagi & Swany 2023, Eq. 6) picks the ratio c that balances parallel
efficiency (synchronization time t_sync(c), to minimise) against statistical efficiency
(compression gain(c), to maximise) over c in [0.001, 0.1]:

1. probe: train a few iterations at each candidate ratio from a snapshot and measure the
   mean gain and the modeled sync time per step (done by the strategy; this module only sees
   the numbers);
2. fit: a power law ln gain(c) = a + b ln c and a line t(c) = t0 + s c, each by least
   squares (`numpy.polyfit`, degree 1). The time line is exact for one collective under
   the alpha-beta model (a latency term plus bytes proportional to c). Measured gains are
   close to straight in log-log over this range, and a power law stays positive, whereas a
   line in ln c crosses zero at small c and a clipped zero gain would swamp the gain
   objective (1/gain) for every other c;
3. solve: NSGA-II (Optuna's `NSGAIISampler`, seeded) minimising F = (t(c), 1/gain(c)), the
   paper's two objectives, in an in-memory study driven by ask/tell, c sampled
   log-uniformly in the bounds;
4. pick: on the Pareto front, each objective divided by its largest value on the front, the
   trial with the smallest weighted sum (default 0.6 time, 0.4 gain, as in the authors'
   code). Scaling by the maximum, not min-max, keeps the network in the answer: when latency
   dominates, t(c) is nearly flat relative to its size and the pick moves toward higher
   ratios; min-max scaling would map every increasing line to the same [0, 1] ramp and make
   the pick independent of the network.

The controller re-probes when the gain moves by 10% or more from the reference gain (the
first gain observed after a solve), and re-solves on the probed gains with recomputed sync
times when the network changes. Pure: no communication, no model.

The candidates, weights, ratio bounds and re-probe threshold default to the paper's values
(`DEFAULT_*` below) and are settable as `method.candidates`, `method.weights`,
`method.ratio_bounds` and `method.reprobe_change` (`TopKConfig`); the `check_*` functions
validate them wherever they enter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from repro.errors import UserError

if TYPE_CHECKING:
    import numpy as np

DEFAULT_CANDIDATES = (0.1, 0.033, 0.011, 0.004, 0.001)
DEFAULT_WEIGHTS = (0.6, 0.4)
DEFAULT_BOUNDS = (0.001, 0.1)
DEFAULT_REPROBE_CHANGE = 0.1  # re-probe when the gain moves by >= 10%
_GAIN_FLOOR = 1e-12  # a measured gain of exactly 0 (an all-zero Top-k) has no logarithm


def check_candidates(candidates: Sequence[float]) -> None:
    """Candidate ratios must lie in (0, 1], and two distinct ones are needed to fit a line."""
    if any(not 0 < c <= 1 for c in candidates):
        raise UserError(f"method.candidates={list(candidates)} must all be in (0, 1]")
    if len(set(candidates)) < 2:
        raise UserError(f"method.candidates={list(candidates)} needs at least two distinct ratios")


def check_weights(weights: Sequence[float]) -> None:
    """(time weight, gain weight): two non-negative numbers summing to 1."""
    if len(weights) != 2 or any(w < 0 for w in weights) or abs(sum(weights) - 1) > 1e-9:
        raise UserError(
            f"method.weights={list(weights)} must be two non-negative numbers "
            "(time, gain) that sum to 1"
        )


def check_bounds(bounds: Sequence[float]) -> None:
    """(low, high) of the ratio the solver searches: 0 < low < high <= 1."""
    if len(bounds) != 2 or not 0 < bounds[0] < bounds[1] <= 1:
        raise UserError(
            f"method.ratio_bounds={list(bounds)} must be two ratios (low, high) with "
            "0 < low < high <= 1"
        )


def check_reprobe_change(change: float) -> None:
    """The relative gain change that triggers a re-probe: a positive fraction."""
    if not 0 < change < math.inf:
        raise UserError(
            f"method.reprobe_change={change} must be a positive fraction of the gain "
            "(0.1: re-probe when it moves by 10%)"
        )


def check_cr(cr: float) -> None:
    if not 0 < cr <= 1:
        raise UserError(f"method.cr={cr} must be in (0, 1]")


class FixedRatio:
    """The same ratio for the whole run; never probes or re-solves."""

    def __init__(self, cr: float):
        check_cr(cr)
        self.cr = cr

    def needs_probe(self, current_gain: float) -> bool:
        return False

    def needs_solve(self, link_changed: bool) -> bool:
        return False

    def state_dict(self) -> dict:
        return {"cr": self.cr}

    def load_state_dict(self, state: dict) -> None:
        self.cr = state["cr"]


@dataclass(frozen=True)
class Curves:
    """The fitted curves: ln gain(c) = gain_a + gain_b ln c, t(c) = time_a + time_b c."""

    gain_a: float
    gain_b: float
    time_a: float
    time_b: float

    def gain(self, c: float) -> float:
        # Sending everything cannot gain more than 1, whatever the extrapolation says.
        return min(1.0, math.exp(self.gain_a + self.gain_b * math.log(c)))

    def time(self, c: float) -> float:
        return self.time_a + self.time_b * c


def fit_curves(probes: Mapping[float, tuple[float, float]]) -> Curves:
    """Least-squares fits through {c: (gain, sync_seconds)}: ln gain on ln c, time on c."""
    import numpy as np  # here: `TopKConfig` validation imports this module, numpy-free

    cs = np.array(sorted(probes), dtype=float)
    gains = np.array([max(probes[c][0], _GAIN_FLOOR) for c in cs])
    times = np.array([probes[c][1] for c in cs])
    gain_b, gain_a = np.polyfit(np.log(cs), np.log(gains), 1)
    time_b, time_a = np.polyfit(cs, times, 1)
    return Curves(float(gain_a), float(gain_b), float(time_a), float(time_b))


class MOORatioController:
    """Eq. 6 of Flexible Top-k: probe candidates, fit, NSGA-II, weighted Pareto pick."""

    def __init__(
        self,
        candidates: Sequence[float] = DEFAULT_CANDIDATES,
        weights: Sequence[float] = DEFAULT_WEIGHTS,
        bounds: Sequence[float] = DEFAULT_BOUNDS,
        trials: int = 200,
        population: int = 20,
        seed: int = 0,
        reprobe_change: float = DEFAULT_REPROBE_CHANGE,
    ):
        check_candidates(candidates)
        check_weights(weights)
        check_bounds(bounds)
        check_reprobe_change(reprobe_change)
        low, high = bounds
        if population < 2 or trials < population:
            raise UserError(
                f"NSGA-II needs population >= 2 and trials >= population, got "
                f"population={population}, trials={trials}"
            )
        self.candidates = tuple(candidates)
        self.weights = tuple(weights)
        self.bounds = (low, high)
        self.trials, self.population, self.seed = trials, population, seed
        self.reprobe_change = reprobe_change
        self.cr = max(self.candidates)
        self.gains: dict[float, float] = {}
        self.curves: Curves | None = None
        self.reference_gain: float | None = None

    def needs_probe(self, current_gain: float) -> bool:
        """True before the first probe, and when the gain has moved by >= `reprobe_change`
        (10%) since the solve.

        The reference is the first gain reported after a solve rather than the fitted
        gain at the chosen c, so a fitting error alone never triggers a re-probe.
        """
        if not self.gains:
            return True
        if self.reference_gain is None:
            self.reference_gain = current_gain
            return False
        return abs(current_gain - self.reference_gain) >= self.reprobe_change * self.reference_gain

    def needs_solve(self, link_changed: bool) -> bool:
        """A network change moves the time curve: re-solve on the probed gains."""
        return link_changed and bool(self.gains)

    def solve(self, probes: Mapping[float, tuple[float, float]]) -> float:
        """Choose and adopt c from {c: (mean gain, sync seconds per step)}; returns it."""
        check_candidates(list(probes))
        self.gains = {float(c): float(g) for c, (g, _) in probes.items()}
        self.curves = fit_curves(probes)
        self.cr = self._pareto_pick(self.curves)
        self.reference_gain = None
        return self.cr

    def _pareto_pick(self, curves: Curves) -> float:
        import numpy as np
        import optuna  # imported here: every spawned worker imports this module, few solve

        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no per-study INFO lines
        try:
            sampler = optuna.samplers.NSGAIISampler(population_size=self.population, seed=self.seed)
            study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
            space = {"c": optuna.distributions.FloatDistribution(*self.bounds, log=True)}
            for _ in range(self.trials):
                trial = study.ask(space)
                c = trial.params["c"]
                study.tell(trial, [curves.time(c), 1.0 / curves.gain(c)])
            front = study.best_trials
        finally:
            optuna.logging.set_verbosity(verbosity)
        values = np.array([t.values for t in front])
        score = _scaled(values[:, 0]) * self.weights[0] + _scaled(values[:, 1]) * self.weights[1]
        return float(front[int(np.argmin(score))].params["c"])

    def state_dict(self) -> dict:
        return {
            "cr": self.cr,
            "gains": dict(self.gains),
            "curves": None if self.curves is None else vars(self.curves).copy(),
            "reference_gain": self.reference_gain,
        }

    def load_state_dict(self, state: dict) -> None:
        self.cr = state["cr"]
        self.gains = dict(state["gains"])
        self.curves = None if state["curves"] is None else Curves(**state["curves"])
        self.reference_gain = state["reference_gain"]


def _scaled(x: np.ndarray) -> np.ndarray:
    """Each value over the largest (all zeros when the largest is 0: nothing to trade)."""
    import numpy as np

    top = np.abs(x).max()
    return np.zeros_like(x) if top == 0 else x / top
