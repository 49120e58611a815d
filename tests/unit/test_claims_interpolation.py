"""Steps to a target read between evaluations: the crossing of
the line through the two logged points that bracket it, checked against curves whose
crossing is known in closed form."""

import math

import pytest

from repro.claims.calculators.registry import check_params
from repro.claims.calculators.time_to_target import (
    reach_interpolated,
    steps_to_target,
    time_to_target_ratio,
)
from repro.errors import UserError
from repro.track.series import first_reach
from tests.unit.report_data import make_run

EVERY_10 = list(range(10, 301, 10))


def test_a_straight_line_is_read_exactly():
    # acc = s / 200 crosses 0.855 at s = 171; the logged points stop at 180
    ys = [s / 200 for s in EVERY_10]
    assert first_reach(EVERY_10, ys, 0.855, "max") == 180
    assert reach_interpolated(EVERY_10, ys, 0.855, "max") == pytest.approx(171)
    # a loss 3 - s / 100 falls to 1.25 at s = 175
    loss = [3 - s / 100 for s in EVERY_10]
    assert reach_interpolated(EVERY_10, loss, 1.25, "min") == pytest.approx(175)


def test_a_concave_curve_is_bracketed_by_its_true_crossing_and_the_logged_point():
    # acc = 0.9 (1 - exp(-s / 40)) reaches 0.85 at s* = 40 ln 18 = 115.6; a chord lies below
    # a concave curve, so the interpolated crossing is at or after s* and before step 120
    ys = [0.9 * (1 - math.exp(-s / 40)) for s in EVERY_10]
    exact = 40 * math.log(18)
    got = reach_interpolated(EVERY_10, ys, 0.85, "max")
    assert exact <= got < first_reach(EVERY_10, ys, 0.85, "max") == 120
    assert got - exact < 1  # within a step of the truth, where the logged point is 4.4 late
    # evaluated every step, the first logged step reaching it is the ceiling of s*
    every_step = list(range(1, 301))
    dense = [0.9 * (1 - math.exp(-s / 40)) for s in every_step]
    assert first_reach(every_step, dense, 0.85, "max") == math.ceil(exact)


def test_the_first_crossing_counts_when_the_curve_dips_back():
    steps = [10, 20, 30, 40, 50]
    ys = [0.5, 0.9, 0.7, 0.95, 0.99]  # crosses 0.8 between 10 and 20, dips, crosses again
    assert reach_interpolated(steps, ys, 0.8, "max") == pytest.approx(10 + 0.3 / 0.4 * 10)


def test_edges_first_point_already_there_and_never():
    assert reach_interpolated([10, 20], [0.9, 0.95], 0.85, "max") == 10
    assert math.isinf(reach_interpolated([10, 20], [0.1, 0.2], 0.85, "max"))
    with pytest.raises(ValueError, match="mode"):
        reach_interpolated([10], [0.1], 0.5, "up")


def test_calculators_interpolate_only_when_asked():
    # "slow" reaches acc s / 200, "fast" s / 100: 0.45 at steps 90 and 45 exactly; the
    # logged points (every 10 steps) give 90 and 50
    runs = {
        "fast": make_run("fast"),
        "slow": make_run("slow", extra=lambda s: {"test/acc": s / 200}, steps=EVERY_10),
    }
    params = {"metric": "test/acc", "clock": "step", "target": 0.45, "mode": "max"}
    logged = time_to_target_ratio(runs, "slow", "fast", **params)
    assert logged.value == pytest.approx(90 / 50)
    read = time_to_target_ratio(runs, "slow", "fast", interpolate=True, **params)
    assert read.value == pytest.approx(2.0) and "interpolated" in read.note
    assert steps_to_target(runs, "fast", "test/acc", 0.45).value == 50
    assert steps_to_target(runs, "fast", "test/acc", 0.45, interpolate=True).value == (
        pytest.approx(45)
    )


def test_interpolate_must_be_a_bool_in_a_claims_file():
    params = {"run": "a", "reference": "b", "metric": "test/acc", "interpolate": "yes"}
    with pytest.raises(UserError, match="interpolate='yes' must be true or false"):
        check_params("time_to_target_ratio", params)
    check_params("time_to_target_ratio", {**params, "interpolate": True})
