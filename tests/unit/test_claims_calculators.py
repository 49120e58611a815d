"""Calculators against values computed by hand from the closed-form runs of `report_data`."""

import ast
import functools
import math
import subprocess
import sys

import pytest

from repro.claims.calculators.by_setting import comm_seconds_per_step, speedup_vs_bound, trend
from repro.claims.calculators.final_values import (
    final_metric,
    metric_ratio,
    monotone_decrease,
    sends_per_parameter,
)
from repro.claims.calculators.time_to_target import steps_to_target, time_to_target_ratio
from repro.track.series import MissingRun, NotMeasurable, trailing_mean
from tests.helpers import REPO
from tests.unit.report_data import by_label, make_run


def test_trailing_mean_by_hand():
    assert trailing_mean([1, 2, 3, 4], 1) == [1, 2, 3, 4]
    assert trailing_mean([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]
    assert trailing_mean([1, 2, 3, 4], 3) == [1, 1.5, 2, 3]


def test_final_metric_and_ratio(runs):
    got = final_metric(runs, run="sync", metric="train/loss", smooth=3).value
    assert got == pytest.approx((100 / 80 + 100 / 90 + 100 / 100) / 3)
    # adacomm ends at 80/100, sync at 100/100
    assert metric_ratio(runs, "adacomm", "sync", "train/loss").value == pytest.approx(0.8)


def test_sends_per_parameter_is_the_ratio_times_the_steps_taken():
    runs = {"star": make_run("star", method={"name": "topk", "cr": 0.01})}
    assert sends_per_parameter(runs, "star").value == pytest.approx(0.01 * 100)  # ends at 100
    runs["dense"] = make_run("dense", method={"name": "sync"})
    with pytest.raises(NotMeasurable, match="no method.cr"):
        sends_per_parameter(runs, "dense")


def test_time_to_target_ratio_by_hand(runs):
    # sync reaches its final loss 1.0 at step 100 = 100 s; adacomm (80/s) at step 80 = 20 s
    assert time_to_target_ratio(runs, "adacomm", "sync").value == pytest.approx(0.2)
    # the wall clock is 2x the modeled one for both runs: same ratio; in steps 80 / 100
    assert time_to_target_ratio(runs, "adacomm", "sync", clock="wall").value == pytest.approx(0.2)
    assert time_to_target_ratio(runs, "adacomm", "sync", clock="step").value == pytest.approx(0.8)
    # window 2: target (100/90 + 1)/2 = 1.0556, first reached by sync at step 100; adacomm's
    # smoothed loss is (80/70 + 1)/2 = 1.071 at step 80 and (1 + 80/90)/2 = 0.944 at step 90
    m = time_to_target_ratio(runs, "adacomm", "sync", smooth=2)
    assert m.value == pytest.approx(0.25 * 90 / 100)
    # an explicit target on accuracy (s / 100 in both runs): step 50 = 12.5 s against 50 s
    acc = time_to_target_ratio(runs, "adacomm", "sync", metric="test/acc", target=0.5, mode="max")
    assert acc.value == pytest.approx(0.25)


def test_time_to_target_never_reached_is_inf(runs):
    runs["slow"] = make_run("slow", loss=lambda s: 200 / s)
    m = time_to_target_ratio(runs, "slow", "sync")
    assert math.isinf(m.value) and "train/loss 1 never reached by slow; by sync at 100" in m.note


def test_reference_that_never_reaches_an_explicit_target_fails_the_claim(runs):
    runs["slow"] = make_run("slow", loss=lambda s: 200 / s)
    # sync reaches loss 1.5 at step 67 (100/67 < 1.5); slow (200/s) never gets below 2.0
    m = time_to_target_ratio(runs, "sync", "slow", target=1.5)
    assert m.value == 0.0 and "never reached by slow; sync at" in m.note
    both = time_to_target_ratio(runs, "slow", "slow", target=1.5)
    assert math.isnan(both.value) and "nor does slow" in both.note


def test_steps_to_target_by_hand(runs):
    assert steps_to_target(runs, "sync", "test/acc", 0.55).value == 60
    # window 2 smooths s/100 to (s - 5)/100: 0.55 at step 60 < 0.56, 0.65 at step 70
    assert steps_to_target(runs, "sync", "test/acc", 0.56, smooth=2).value == 70
    assert math.isinf(steps_to_target(runs, "sync", "test/acc", 1.5).value)
    assert steps_to_target(runs, "sync", "train/loss", 2.0, mode="min").value == 50


@pytest.mark.parametrize(
    ("taus", "share"),
    [
        ([16, 16, 8, 8, 4, 2, 2, 2, 2, 2], 1.0),
        ([16, 8, 12, 4, 4, 4, 4, 4, 4, 4], 2 / 3),
        ([4] * 10, 0.0),
        ([4, 2, 8, 8, 8, 8, 8, 8, 8, 8], 0.0),  # ends higher than it started
    ],
)
def test_monotone_decrease_share(taus, share):
    run = make_run("adacomm", extra=lambda s: {"method/tau": taus[s // 10 - 1]})
    assert monotone_decrease({"adacomm": run}, "adacomm").value == pytest.approx(share)


def test_trend_over_tau(runs):
    local = {"method.name": "local_sgd"}
    # modeled s/step: sync (tau 1) 1.0, tau 4 0.5, tau 16 0.3; final loss 1.0, 1.2, 1.5
    faster = trend(
        runs,
        local,
        "method.tau",
        "time/modeled_s",
        "decreasing",
        per_step=True,
        include={"sync": 1},
    )
    assert faster.value == 1.0 and "tau=4: 0.5" in faster.note
    worse = trend(runs, local, "method.tau", "train/loss", "increasing", include={"sync": 1})
    assert worse.value == 1.0
    runs["local_sgd_tau16"] = make_run(
        "local_sgd_tau16", loss=lambda s: 110 / s, method={"name": "local_sgd", "tau": 16}
    )
    mixed = trend(runs, local, "method.tau", "train/loss", "increasing", include={"sync": 1})
    assert mixed.value == 0.5  # 1.0 -> 1.2 up, 1.2 -> 1.1 down


def test_a_common_step_is_the_last_step_every_run_logged():
    """Sync stops on a time budget at step 41, off the evaluation grid of 20 and 40 that the
    others log on: all are read at step 40, over the same window. Sync's own last points
    (40, 41) were read against the others' (20, 40): at step 40 alone the losses below fall
    with tau, and read so the trend rose."""
    local = {"method.name": "local_sgd"}
    runs = {
        "sync": make_run("sync", loss=lambda s: 0.1 if s == 41 else 0.3, steps=[20, 40, 41]),
        "local_sgd_tau4": make_run(
            "local_sgd_tau4",
            loss=lambda s: 0.2,
            method={"name": "local_sgd", "tau": 4},
            steps=[20, 40, 60],
        ),
        "local_sgd_tau16": make_run(
            "local_sgd_tau16",
            loss=lambda s: 0.15,
            method={"name": "local_sgd", "tau": 16},
            steps=[20, 40, 60],
        ),
    }
    by_tau = functools.partial(
        trend, runs, local, "method.tau", "train/loss", "increasing", include={"sync": 1}
    )
    got = by_tau(common_step=True, smooth=2)
    assert got.note == "tau=1: 0.3, tau=4: 0.2, tau=16: 0.15 (at step 40)"
    assert got.value == 0.0
    runs["sync"] = make_run("sync", steps=[21, 41])
    with pytest.raises(NotMeasurable, match="no step at which every run logged 'train/loss'"):
        by_tau(common_step=True)


def test_comm_seconds_per_step_alpha_beta():
    # 4 workers, 1 ms, 8 Gbit/s = 1e9 B/s, one 1e6-byte collective per step:
    # ring 2*3*1e-3 + 2*3/4 * 1e6 * 1e-9 = 0.0075 s; tree 2*2*1e-3 + 2*2*1e6*1e-9 = 0.008 s
    run = make_run("sync")
    assert comm_seconds_per_step(run) == pytest.approx(0.0075)
    assert comm_seconds_per_step(run, "tree") == pytest.approx(0.008)
    # two collectives of 0.5e6 bytes per step: 2 * (0.006 + 1.5 * 0.5e6 * 1e-9)
    split = make_run("sync", extra=lambda s: {"comm/collectives": 2 * s})
    assert comm_seconds_per_step(split) == pytest.approx(0.0135)
    scaled = make_run("sync", config={"network": {"bytes_scale": 10}})
    assert comm_seconds_per_step(scaled) == pytest.approx(0.006 + 0.015)


def test_speedup_vs_bound_by_hand():
    # sync 0.01 s/step with D = 0.0075 s -> E[Y_m:m] = 0.0025 s, a = 3
    runs = by_label(
        [
            make_run("sync", sec_per_step=0.01),
            make_run("t4", sec_per_step=0.004, method={"name": "local_sgd", "tau": 4}),
            make_run("t16", sec_per_step=0.003, method={"name": "local_sgd", "tau": 16}),
        ]
    )
    m = speedup_vs_bound(runs, {"method.name": "local_sgd"})
    # tau 4: 2.5 / (4 / 1.75) = 1.09375; tau 16: (10/3) / (4 / (1 + 3/16)) = 190/192
    assert m.value == pytest.approx(190 / 192)
    assert "a=3 " in m.note


def test_missing_run_and_metric_raise(runs):
    with pytest.raises(MissingRun, match="no run labelled 'nope'"):
        time_to_target_ratio(runs, "nope", "sync")
    with pytest.raises(MissingRun, match="at least 2 runs"):
        trend(runs, {"method.name": "topk"}, "method.cr", "train/loss", "increasing")
    with pytest.raises(NotMeasurable, match="logged no 'method/cr'"):
        final_metric(runs, "sync", "method/cr")


def test_every_calculator_module_is_found_with_no_list_of_them():
    """A fresh interpreter that imports only the registry finds the calculators of every
    module of `repro.claims.calculators`: adding a calculator is adding a module."""
    code = "from repro.claims.calculators.registry import registered; print(sorted(registered()))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    found = ast.literal_eval(out.stdout)
    one_per_module = ["final_metric", "time_to_target_ratio", "trend", "step_time_ratio"]
    assert set(one_per_module) <= set(found)
