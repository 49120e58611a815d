"""Report engine: calculators against hand-computed values, verdict rules, claims files."""

import math
from pathlib import Path

import pytest

from repro.errors import UserError
from repro.report.calculators import (
    comm_seconds_per_step,
    final_metric,
    metric_ratio,
    monotone_decrease,
    speedup_vs_bound,
    steps_to_target,
    time_to_target_ratio,
    trend,
)
from repro.report.claims import ClaimsFile, Rule, load_claims
from repro.report.seeds import evaluate
from repro.report.series import MissingRun, NotMeasurable, trailing_mean
from tests.unit.report_data import adacomm_set, claim_dict, make_run, seeded

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"


def by_label(runs):
    return {r.config["experiment"]["label"]: r for r in runs}


@pytest.fixture
def runs():
    return by_label(adacomm_set())


def test_trailing_mean_by_hand():
    assert trailing_mean([1, 2, 3, 4], 1) == [1, 2, 3, 4]
    assert trailing_mean([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]
    assert trailing_mean([1, 2, 3, 4], 3) == [1, 1.5, 2, 3]


def test_final_metric_and_ratio(runs):
    got = final_metric(runs, run="sync", metric="train/loss", smooth=3).value
    assert got == pytest.approx((100 / 80 + 100 / 90 + 100 / 100) / 3)
    # adacomm ends at 80/100, sync at 100/100
    assert metric_ratio(runs, "adacomm", "sync", "train/loss").value == pytest.approx(0.8)


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
    assert math.isinf(m.value) and "never" in m.note


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


@pytest.mark.parametrize(
    ("ours", "verdict"),
    [
        (0.2, "reproduced"),
        (0.4, "reproduced"),
        (0.41, "partly"),
        (0.9, "partly"),
        (0.95, "not reproduced"),
        (math.inf, "not reproduced"),
        (math.nan, "not reproduced"),
    ],
)
def test_verdict_thresholds(ours, verdict):
    claim = claims_file(
        [
            claim_dict(
                published="3x less",
                band=None,
                verdict={"reproduced": {"at_most": 0.4}, "partly": {"at_most": 0.9}},
            )
        ]
    ).claims[0]
    assert claim.judge(ours) == verdict


@pytest.mark.parametrize(
    ("ours", "verdict"),
    [
        (0.266, "partly"),
        (0.267, "reproduced"),
        (0.333, "reproduced"),
        (0.4, "reproduced"),
        (0.41, "partly"),
        (0.95, "not reproduced"),
        (math.inf, "not reproduced"),
    ],
)
def test_band_verdicts(ours, verdict):
    claim = claims_file([claim_dict(verdict={"partly": {"at_most": 0.9}})]).claims[0]
    assert claim.judge(ours) == verdict
    assert claim.criterion() == "band 0.267 to 0.4: published 1/3 +- 20%; partly: at most 0.9"


def test_rule_bounds():
    assert Rule(at_least=1.0, at_most=2.0).holds(1.5)
    assert Rule(at_least=1.0).holds(1.0) and not Rule(at_least=1.0).holds(0.99)
    assert not Rule(at_most=2.0).holds(math.nan)
    assert Rule(at_most=1.0).contains(Rule(at_least=0.2, at_most=0.5))
    assert not Rule(at_least=0.3, at_most=1.0).contains(Rule(at_most=0.5))
    with pytest.raises(UserError, match="at_least and/or at_most"):
        Rule()
    with pytest.raises(UserError, match="inverted"):
        Rule(at_least=2.0, at_most=1.0)


def claims_file(claims):
    return ClaimsFile(paper="adacomm", title="t", citation="c", claims=claims)


def test_evaluate_verdicts_not_run_not_assessed_not_measured(runs):
    cf = claims_file(
        [
            claim_dict(),
            claim_dict(
                id="lost",
                metric={
                    "calculator": "time_to_target_ratio",
                    "params": {"run": "ghost", "reference": "sync"},
                },
            ),
            claim_dict(id="big", scales=["paper"]),
            claim_dict(
                id="cr",
                metric={
                    "calculator": "final_metric",
                    "params": {"run": "sync", "metric": "method/cr"},
                },
            ),
        ]
    )
    res = {r.claim.id: r for r in evaluate(cf.claims, seeded(runs.values()), "small")}
    assert res["headline"].verdict == "not reproduced"  # 0.2 lies below the band
    assert res["headline"].ours == pytest.approx(0.2) and res["headline"].per_seed == {0: 0.2}
    assert res["lost"].verdict == "not run" and "ghost" in res["lost"].note
    assert res["lost"].ours is None
    assert res["big"].verdict == "not assessed" and "applies to scale paper" in res["big"].note
    assert res["cr"].verdict == "not measured" and "method/cr" in res["cr"].note


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"metric": {"calculator": "magic"}}, "metric: calculator 'magic' is not one of"),
        (
            {"metric": {"calculator": "final_metric", "params": {"run": "a", "colour": 1}}},
            "metric: params for 'final_metric'",
        ),
        ({"scales": ["huge"]}, "scales"),
        ({"published": "3x", "band": None, "verdict": {"partly": {"at_most": 1}}}, "verdict keys"),
        ({"published": "3x", "band": None, "verdict": {"reproduced": {"near": 1}}}, "unknown key"),
        ({"verdict": {"reproduced": {"at_most": 0.4}}}, "verdict.reproduced is not allowed"),
        ({"verdict": {"partly": {"at_most": 0.3}}}, "must be wider than the band"),
        ({"published": "3x"}, "a band needs a numeric published value"),
        ({"colour": "red"}, "unknown key"),
        ({"metric": "time_to_target_ratio"}, "metric must be a mapping"),
        ({"scales": "small"}, "scales"),
        (
            {
                "metric": {
                    "calculator": "time_to_target_ratio",
                    "params": {"run": "a", "reference": "b", "clock": "sundial"},
                }
            },
            "clock='sundial' must be one of step, modeled, wall",
        ),
        (
            {
                "metric": {
                    "calculator": "final_metric",
                    "params": {"run": "a", "metric": "m", "smooth": 0},
                }
            },
            "smooth=0 must be an integer >= 1",
        ),
        ({"verdict": {"partly": {"at_most": "0.4"}}}, "at_most='0.4' must be a number"),
        (
            {"band": {"at_most": "0.4", "reason": "r"}},
            "band.at_most='0.4' must be a number",
        ),
    ],
)
def test_bad_claims_are_user_errors(bad, message):
    with pytest.raises(UserError, match=message):
        claims_file([claim_dict(**bad)])


def test_duplicate_ids_and_bad_figures():
    with pytest.raises(UserError, match="duplicate claim id"):
        claims_file([claim_dict(), claim_dict()])
    with pytest.raises(UserError, match="kind 'pie'"):
        ClaimsFile(
            "adacomm", "t", "c", [], figures=[{"id": "f", "title": "t", "y": "a", "kind": "pie"}]
        )


def test_unknown_paper_lists_known(tmp_path):
    (tmp_path / "adacomm.yaml").write_text("paper: adacomm\n")
    (tmp_path / "topk.yaml").write_text("paper: topk\n")
    with pytest.raises(UserError, match="unknown paper 'nope'.*known papers: adacomm, topk"):
        load_claims("nope", tmp_path)
    with pytest.raises(UserError, match="missing key"):
        load_claims("adacomm", tmp_path)


def test_adacomm_claims_file_on_a_full_run_set():
    cf = load_claims("adacomm", CLAIMS_DIR)
    assert cf.display_name("local_sgd_tau16") == "PASGD (τ = 16)"
    assert cf.display_name("sync") == "Fully synchronous SGD"
    res = {r.claim.id: r for r in evaluate(cf.claims, seeded(adacomm_set()), "small")}
    assert set(res) == {c.id for c in cf.claims}
    # smooth 3: sync's target mean(100/80, 100/90, 1) is first met at step 100 (100 s);
    # adacomm's smoothed loss mean(80/70, 80/80, 80/90) = 1.0106 meets it at step 90 (22.5 s),
    # below the headline's band 0.267 to 0.4 but within its partly rule (at most 0.9)
    assert res["headline_time_to_sync_loss"].ours == pytest.approx(0.225)
    assert res["headline_time_to_sync_loss"].verdict == "partly"
    assert res["tau_decreases"].ours == 1.0
    assert res["larger_tau_faster_per_step"].verdict == "reproduced"
    assert res["larger_tau_worse_final_loss"].verdict == "reproduced"
    assert all(r.verdict in ("reproduced", "partly", "not reproduced") for r in res.values())
    tiny = evaluate(cf.claims, seeded(adacomm_set("tiny")), "tiny")
    assert {r.verdict for r in tiny} == {"not assessed"}
