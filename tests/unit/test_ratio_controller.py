"""Ratio controllers: the fixed ratio, and the multi-objective controller's fit, Pareto pick
(Eq. 6, against a brute-force search), re-probe trigger, state and validation."""

import math

import numpy as np
import pytest

from repro.compress.policy import CollectivePolicy
from repro.compress.ratio import FixedRatio, MOORatioController, fit_curves
from repro.errors import UserError
from repro.netmodel.cost import Link

CANDIDATES = (0.1, 0.033, 0.011, 0.004, 0.001)


def test_fixed_ratio_never_probes():
    fixed = FixedRatio(0.01)
    assert fixed.cr == 0.01
    assert not fixed.needs_probe(0.5) and not fixed.needs_solve(True)
    for bad in (0.0, -1.0, 1.5):
        with pytest.raises(UserError, match=f"method.cr={bad}"):
            FixedRatio(bad)


def probe_data(latency, bandwidth, m=4 * 11_200_000, n=8):
    """Gains falling with ln c, and the cheapest exchange's modeled time, per candidate."""
    link = Link(latency, bandwidth)
    policy = CollectivePolicy()
    return {
        c: (
            min(1.0, 0.95 + 0.12 * math.log(c / 0.1)),
            policy.seconds(policy.decide(link, m, c, n), link, m, c, n),
        )
        for c in CANDIDATES
    }


def test_fit_recovers_a_power_law_and_a_line():
    probes = {c: (2.0 * c**0.6, 0.002 + 3.0 * c) for c in CANDIDATES}
    curves = fit_curves(probes)
    assert curves.gain_a == pytest.approx(math.log(2.0)) and curves.gain_b == pytest.approx(0.6)
    assert curves.time_a == pytest.approx(0.002) and curves.time_b == pytest.approx(3.0)
    assert curves.gain(0.05) == pytest.approx(2.0 * 0.05**0.6)
    assert curves.gain(1e-9) > 0
    assert curves.gain(0.5) == 1.0  # extrapolated past 1: sending more cannot gain more


@pytest.mark.parametrize(
    "probes",
    [
        probe_data(1e-3, 25e9 / 8),
        probe_data(1e-3, 1e9 / 8),
        probe_data(50e-3, 1e9 / 8),
        probe_data(50e-3, 25e9 / 8),
        {c: (0.5, 1.0) for c in CANDIDATES},  # nothing to trade
        {c: (1.0 - c, 1.0 - c) for c in CANDIDATES},  # a faster and better low ratio
        {c: (c, 0.5 * c) for c in CANDIDATES},
    ],
)
def test_moo_stays_in_bounds_and_is_reproducible(probes):
    first = MOORatioController().solve(probes)
    assert 0.001 <= first <= 0.1
    controller = MOORatioController()
    assert controller.solve(probes) == first
    assert controller.solve(probes) == first  # same network, same probe data: same choice
    assert not controller.needs_solve(False)
    assert controller.needs_solve(True)


def test_moo_moves_with_the_network():
    # Latency-bound: the time objective is nearly flat, so the gain pulls c up;
    # bandwidth-bound: time grows in proportion to c, so c comes down.
    latency_bound = MOORatioController().solve(probe_data(50e-3, 25e9 / 8))
    bandwidth_bound = MOORatioController().solve(probe_data(1e-3, 1e9 / 8))
    assert latency_bound > 2 * bandwidth_bound
    # A monotone trade-off with no cost to a higher ratio: the best gain is the top bound.
    assert MOORatioController().solve({c: (0.5 + 0.1 * c, 1.0) for c in CANDIDATES}) > 0.09


def test_moo_reprobe_trigger_at_ten_percent():
    controller = MOORatioController()
    assert controller.needs_probe(0.5)  # never probed
    controller.solve(probe_data(1e-3, 1e9 / 8))
    assert not controller.needs_probe(0.5)  # the first gain after a solve is the reference
    assert not controller.needs_probe(0.549)
    assert not controller.needs_probe(0.451)
    assert controller.needs_probe(0.56)
    assert controller.needs_probe(0.44)
    controller.solve(probe_data(1e-3, 1e9 / 8))
    assert not controller.needs_probe(0.8)  # a solve resets the reference


def brute_force_pick(probes, weights, bounds, grid=20001):
    """Eq. 6 solved without the controller: least squares for ln gain on ln c and for time
    on c, both objectives on a log grid of c over the bounds, the non-dominated points, each
    objective over its largest value on that front, and the weighted sum's minimiser.

    Returns (c, its weighted objective, the front's largest time and 1/gain, the fit).
    """
    cs = np.array(sorted(probes))
    gains = np.array([probes[c][0] for c in cs])
    times = np.array([probes[c][1] for c in cs])
    (gain_a, gain_b), *_ = np.linalg.lstsq(np.column_stack([np.ones(5), np.log(cs)]), np.log(gains))
    (time_a, time_b), *_ = np.linalg.lstsq(np.column_stack([np.ones(5), cs]), times)
    c = np.geomspace(bounds[0], bounds[1], grid)
    t = time_a + time_b * c
    inv_gain = 1 / np.minimum(1.0, np.exp(gain_a + gain_b * np.log(c)))
    front, best = [], math.inf
    for i in np.lexsort((inv_gain, t)):  # by time, then 1/gain: keep each strict improvement
        if inv_gain[i] < best:
            front.append(i)
            best = inv_gain[i]
    front = np.array(front)
    t_max, g_max = t[front].max(), inv_gain[front].max()
    score = weights[0] * t[front] / t_max + weights[1] * inv_gain[front] / g_max
    pick = front[np.argmin(score)]
    return c[pick], score.min(), (t_max, g_max), (gain_a, gain_b, time_a, time_b)


@pytest.mark.parametrize(
    ("network", "weights", "bounds"),
    [
        ((1e-3, 25e9 / 8), (0.6, 0.4), (0.001, 0.1)),  # the paper's weights and bounds
        ((50e-3, 1e9 / 8), (0.6, 0.4), (0.001, 0.1)),
        ((1e-3, 1e9 / 8), (0.3, 0.7), (0.001, 0.1)),
        ((50e-3, 25e9 / 8), (0.9, 0.1), (0.004, 0.05)),
    ],
)
def test_moo_pick_matches_a_brute_force_search(network, weights, bounds):
    probes = probe_data(*network)
    controller = MOORatioController(CANDIDATES, weights, bounds)
    chosen = controller.solve(probes)
    c_best, best, (t_max, g_max), fit = brute_force_pick(probes, weights, bounds)
    curves = controller.curves
    assert (curves.gain_a, curves.gain_b, curves.time_a, curves.time_b) == pytest.approx(fit)
    assert bounds[0] <= chosen <= bounds[1]
    # NSGA-II samples c; its pick is within 6% of the grid's, and its objective (on the
    # grid front's scale) within 0.1% of the grid's minimum.
    assert abs(math.log(chosen / c_best)) < 0.06
    mine = weights[0] * curves.time(chosen) / t_max + weights[1] / curves.gain(chosen) / g_max
    assert mine == pytest.approx(best, rel=1e-3)


def test_moo_state_round_trip():
    controller = MOORatioController()
    controller.solve(probe_data(1e-3, 1e9 / 8))
    controller.needs_probe(0.4)
    restored = MOORatioController()
    restored.load_state_dict(controller.state_dict())
    assert restored.cr == controller.cr
    assert restored.gains == controller.gains
    assert restored.curves == controller.curves
    assert restored.needs_probe(0.45) and not restored.needs_probe(0.43)


def test_moo_validation():
    with pytest.raises(UserError, match="method.weights"):
        MOORatioController(weights=(0.5, 0.6))
    with pytest.raises(UserError, match="method.weights"):
        MOORatioController(weights=(1.2, -0.2))
    with pytest.raises(UserError, match="method.candidates"):
        MOORatioController(candidates=(0.1, 0.0))
    with pytest.raises(UserError, match="method.candidates"):
        MOORatioController(candidates=(1.5, 0.1))
    with pytest.raises(UserError, match="at least two"):
        MOORatioController(candidates=(0.1,))
    with pytest.raises(UserError, match="method.ratio_bounds"):
        MOORatioController(bounds=(0.1, 0.01))
    with pytest.raises(UserError, match="method.reprobe_change=0"):
        MOORatioController(reprobe_change=0)
    MOORatioController(weights=(0.3, 0.7), candidates=(1.0, 0.5))
