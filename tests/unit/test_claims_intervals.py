"""The seeds' 95% bootstrap interval against scipy and an exact enumeration, and a claim's
verdict at every position of its interval against the band and the partly rule."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from repro.claims.bootstrap import RESAMPLES, mean_interval
from repro.claims.claims_file import ClaimsFile
from repro.claims.verdicts import judge, place
from tests.unit.report_data import claim_dict

DATA = [0.31, 0.42, 0.37, 0.55, 0.29, 0.48, 0.36, 0.44]


def test_interval_matches_scipys_percentile_bootstrap_within_monte_carlo_error():
    ours = mean_interval(DATA)
    reference = stats.bootstrap(
        (np.array(DATA),),
        np.mean,
        confidence_level=0.95,
        n_resamples=100_000,
        method="percentile",
        rng=np.random.default_rng(7),
    ).confidence_interval
    # Both are Monte Carlo estimates of the same 2.5% and 97.5% quantiles of the bootstrap
    # distribution of the mean, with independent draws. A q-quantile estimated from B draws
    # has standard error sqrt(q (1 - q) / B) / f, f the density at the quantile; the
    # distribution is close to normal with sd s = std(data) / sqrt(n), so f = phi(1.96) / s.
    # Allow 5 standard errors of the difference of the two estimates.
    s = np.std(DATA) / math.sqrt(len(DATA))
    density = math.exp(-(1.96**2) / 2) / math.sqrt(2 * math.pi) / s
    se = [math.sqrt(0.025 * 0.975 / b) / density for b in (RESAMPLES, 100_000)]
    tolerance = 5 * math.hypot(*se)
    assert tolerance < 0.15 * s  # a check that could tell a wrong interval apart
    assert ours.low == pytest.approx(reference.low, abs=tolerance)
    assert ours.high == pytest.approx(reference.high, abs=tolerance)
    assert ours.mean == pytest.approx(np.mean(DATA))
    assert mean_interval(DATA) == ours  # a fixed generator: a report repeats


def test_interval_equals_the_exact_percentiles_of_the_enumerated_bootstrap():
    values = [0.0, 1.0, 3.0, 7.0]
    n = len(values)
    means = sorted(sum(pick) / n for pick in itertools.product(values, repeat=n))
    cdf = [(i + 1) / len(means) for i in range(len(means))]
    low = means[next(i for i, c in enumerate(cdf) if c >= 0.025)]
    high = means[next(i for i, c in enumerate(cdf) if c >= 0.975)]
    # the quantiles sit on atoms away from the jumps, so 10,000 draws land on them exactly
    assert sum(m < low for m in means) / len(means) < 0.02
    assert sum(m <= low for m in means) / len(means) > 0.03
    assert sum(m >= high for m in means) / len(means) > 0.03
    interval = mean_interval(values)
    assert (interval.low, interval.high) == (low, high)


def test_at_three_seeds_the_interval_is_the_range_and_at_five_inside_it():
    # what the reports' rule text says of few seeds
    rng = np.random.default_rng(7)
    for values in rng.normal(size=(20, 3)):
        interval = mean_interval(list(values))
        assert (interval.low, interval.high) == pytest.approx((values.min(), values.max()))
    five = rng.normal(size=5)
    interval = mean_interval(list(five))
    assert five.min() < interval.low < interval.high < five.max()


def test_never_reached_one_seed_and_identical_values():
    # a seed that never reached the target: every resample holding it has an infinite mean
    # (1 - (2/3)^3 = 70% of them), the rest are means of 1 and 2, the least (1, 1, 1) a 27th
    interval = mean_interval([1.0, 2.0, math.inf])
    assert (interval.mean, interval.low, interval.high) == (math.inf, 1.0, math.inf)
    assert mean_interval([0.4]) is None
    same = mean_interval([0.2, 0.2, 0.2])
    assert (same.mean, same.low, same.high) == (0.2, 0.2, 0.2)
    with pytest.raises(ValueError, match="not NaN"):
        mean_interval([1.0, math.nan])


def claim(partly=True, cap=10):
    band = {"at_least": 1.0, "at_most": 2.0, "reason": "by hand"}
    verdict = {"partly": {"at_least": 0.5, "at_most": 3.0}} if partly else {}
    c = claim_dict(band=band, published=1.5, verdict=verdict, seed_cap=cap)
    return ClaimsFile(paper="adacomm", title="t", citation="c", seed_cap=10, claims=[c]).claims[0]


@pytest.mark.parametrize(
    ("low", "high", "verdict", "edge"),
    [
        (1.2, 1.8, "reproduced", None),
        (1.0, 2.0, "reproduced", None),  # the band's edges belong to it
        (0.8, 1.2, "undecided", 1.0),
        (1.8, 2.2, "undecided", 2.0),
        (1.5, math.inf, "undecided", 2.0),  # a seed never got there
        (2.2, 2.8, "partly", None),
        (0.6, 0.9, "partly", None),
        (2.8, 3.2, "undecided", 3.0),
        (0.4, 0.6, "undecided", 0.5),
        (3.5, 4.0, "not reproduced", None),
        (0.1, 0.2, "not reproduced", None),
        (math.inf, math.inf, "not reproduced", None),
    ],
)
def test_verdict_at_each_position_of_the_interval(low, high, verdict, edge):
    assert place(claim(), low, high) == (verdict, edge)


def test_without_a_partly_rule_outside_the_band_is_not_reproduced():
    assert place(claim(partly=False), 2.2, 2.8) == ("not reproduced", None)
    assert place(claim(partly=False), 1.8, 2.2) == ("undecided", 2.0)


def test_undecided_below_the_cap_inconclusive_at_it():
    # two seeds: the interval is [0.8, 1.2], across the band's lower edge
    values = {0: 0.8, 1: 1.2}
    verdict, interval, edge = judge(claim(cap=3), values)
    assert (verdict, interval.low, interval.high, edge) == ("undecided", 0.8, 1.2, 1.0)
    assert judge(claim(cap=2), values)[0] == "inconclusive"
    assert judge(claim(cap=2), {0: 1.1, 1: 1.9})[0] == "reproduced"
    assert judge(claim(cap=1), {0: 1.5})[0] == "inconclusive"  # one seed: no interval
