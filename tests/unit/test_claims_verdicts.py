"""Verdicts: one value judged against a claim's band or rules, and a set of claims judged on
runs that are missing, at another scale or without the metric."""

import math

import pytest

from repro.claims.verdict_rules import Rule
from repro.claims.verdicts import evaluate
from repro.errors import UserError
from tests.unit.report_data import claim_dict, claims_file, seeded


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
    # 0.2 lies below the band, but one seed has no interval: more seeds must decide
    assert res["headline"].verdict == "undecided" and res["headline"].interval is None
    assert res["headline"].ours == pytest.approx(0.2) and res["headline"].per_seed == {0: 0.2}
    assert res["lost"].verdict == "not run" and "ghost" in res["lost"].note
    assert res["lost"].ours is None
    assert res["big"].verdict == "not assessed" and "applies to scale paper" in res["big"].note
    assert res["cr"].verdict == "not measured" and "method/cr" in res["cr"].note
