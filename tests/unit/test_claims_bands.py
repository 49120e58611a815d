"""Claims judged on a band around the published number: the band's checks
when a claims file is loaded, and for each calculator the claims files use, a value inside
its band is "reproduced" and one outside is "not reproduced" (synthetic runs whose values are
known by hand)."""

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from repro.claims.claims_file import ClaimsFile, load_claims
from repro.claims.verdicts import evaluate
from repro.errors import UserError
from repro.report.report_cli import main as report_main
from tests.unit.report_data import adacomm_set, make_run, seeded

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"
SCHEDULE = {"network": {"schedule": [{"from_epoch": e} for e in (0.0, 3.0, 6.0)]}}


def adacomm_runs():
    return list(adacomm_set())


def with_slower_tau16():
    """adacomm_set with tau 16's final loss 1.1 (110/s): the loss rises from sync (1.0) to tau
    4 (1.2), then falls to tau 16, so half the steps in tau rise."""
    runs = [r for r in adacomm_set() if r.name != "local_sgd_tau16"]
    method = {"name": "local_sgd", "tau": 16}
    return [*runs, make_run("local_sgd_tau16", loss=lambda s: 110 / s, method=method)]


def tau_steps():
    """AdaComm's tau 16, 8, 12, then 4: two of the three changes are decreases."""
    taus = [16, 8, 12, 4, 4, 4, 4, 4, 4, 4]
    return [make_run("adacomm", extra=lambda s: {"method/tau": taus[s // 10 - 1]})]


def speedup_runs():
    """sync 0.01 s per step of which D = 0.0075 s is the ring allreduce (a = 3); tau 4 at
    0.004 s per step and tau 16 at 0.003 s: measured / bound = 1.09375 and 190/192."""
    return [
        make_run("sync", sec_per_step=0.01),
        make_run("t4", sec_per_step=0.004, method={"name": "local_sgd", "tau": 4}),
        make_run("t16", sec_per_step=0.003, method={"name": "local_sgd", "tau": 16}),
    ]


def acc_offset(points: float):
    """test/acc = s / 100 - points / 100: the run ends `points` percentage points lower."""
    return lambda s: {"test/acc": s / 100 - points / 100, "epoch": s / 10}


def topk_runs():
    """DenseSGD at 1 s per step; Top-k runs faster and `points` of accuracy below it."""
    return [
        make_run("dense", sec_per_step=1.0),
        make_run("ag_c0.1", sec_per_step=0.5, extra=acc_offset(0.5)),
        make_run("ag_c0.001", sec_per_step=0.2, extra=acc_offset(3.0)),
        make_run("star_c0.1", sec_per_step=0.25, extra=acc_offset(2.0)),
        make_run("star_c0.001", sec_per_step=0.2, extra=acc_offset(1.0)),
    ]


def phase_runs():
    """The collective per phase of a three-phase schedule (epoch = step / 10): star_c0.1 uses
    ar_ring in phase 1 (epochs 3-5), star_c0.001 allgather throughout."""

    def coll(s):
        value = "allgather" if s < 30 or s >= 60 else "ar_ring"
        return {"epoch": s / 10, "method/collective": value}

    def allgather(s):
        return {"epoch": s / 10, "method/collective": "allgather"}

    return [
        make_run("star_c0.1", extra=coll, config=SCHEDULE),
        make_run("star_c0.001", extra=allgather, config=SCHEDULE),
    ]


def ratio_runs():
    """A controller's ratio: 0.1 up to step 30, 0.004 to step 60, then 0.033."""

    def cr(s):
        return {"method/cr": 0.1 if s <= 30 else 0.004 if s <= 60 else 0.033}

    return [make_run("moo", extra=cr)]


# calculator -> (runs, params, our value computed by hand)
CASES: dict[str, tuple[Callable[[], list], dict, float]] = {
    # sync reaches its final loss 1.0 at step 100 = 100 s; adacomm (80/s) at step 80 = 20 s
    "time_to_target_ratio": (adacomm_runs, {"run": "adacomm", "reference": "sync"}, 0.2),
    # adacomm ends at loss 80/100, sync at 100/100
    "metric_ratio": (
        adacomm_runs,
        {"run": "adacomm", "reference": "sync", "metric": "train/loss"},
        0.8,
    ),
    # the mean of sync's last three losses, 100/80, 100/90 and 1
    "final_metric": (
        adacomm_runs,
        {"run": "sync", "metric": "train/loss", "smooth": 3},
        (100 / 80 + 100 / 90 + 1) / 3,
    ),
    # c = 0.01 over the 100 steps the run took: each parameter sent once
    "sends_per_parameter": (
        lambda: [make_run("star_c0.01", method={"name": "topk", "cr": 0.01})],
        {"run": "star_c0.01"},
        1.0,
    ),
    # test/acc = s / 100 first reaches 0.55 at step 60
    "steps_to_target": (adacomm_runs, {"run": "sync", "metric": "test/acc", "target": 0.55}, 60),
    "monotone_decrease": (tau_steps, {"run": "adacomm"}, 2 / 3),
    "trend": (
        with_slower_tau16,
        {
            "where": {"method.name": "local_sgd"},
            "include": {"sync": 1},
            "key": "method.tau",
            "metric": "train/loss",
            "direction": "increasing",
        },
        0.5,
    ),
    "speedup_vs_bound": (speedup_runs, {"where": {"method.name": "local_sgd"}}, 190 / 192),
    # the slowest of the matching runs: ag_c0.1 at 0.5 s against dense's 1 s
    "step_time_ratio": (topk_runs, {"pattern": r".*_c.*", "reference": "dense"}, 0.5),
    # the largest drop at c = 0.1: star, 2 points
    "accuracy_drop": (topk_runs, {"pattern": r".*_c0\.1", "reference": "dense"}, 2.0),
    # ag's drop grows from 0.5 to 3 points, star's shrinks from 2 to 1: one of two families
    "drop_grows": (
        topk_runs,
        {"families": ["ag_c", "star_c"], "mild": "0.1", "harsh": "0.001", "reference": "dense"},
        0.5,
    ),
    # phase 1: star_c0.1 picks ar_ring, star_c0.001 allgather: one of two pairs
    "choice_by_phase": (
        phase_runs,
        {"pattern": "star_c.*", "phases": [1], "allowed": ["ar_ring"]},
        0.5,
    ),
    # steps 10-30 at 0.1 and 70-100 at 0.033 lie in [0.01, 0.1]: 7 of 10 points
    "share_in_range": (
        ratio_runs,
        {"run": "moo", "metric": "method/cr", "low": 0.01, "high": 0.1},
        0.7,
    ),
}


def banded(calculator: str, params: dict, published: float, low: float, high: float):
    claim = {
        "id": "c",
        "kind": "outcome",
        "source": "s",
        "statement": "t",
        "metric": {"calculator": calculator, "params": params},
        "published": published,
        "unit": "",
        "scales": ["small"],
        "band": {"at_least": low, "at_most": high, "reason": "by hand"},
    }
    return ClaimsFile(paper="p", title="t", citation="c", seed_cap=10, claims=[claim]).claims


def calculators_in_claims_files() -> set[str]:
    names = set()
    for path in CLAIMS_DIR.glob("*.yaml"):
        for claim in yaml.safe_load(path.read_text()).get("claims", []):
            names.add(claim["metric"]["calculator"])
    return names


def test_every_calculator_of_the_claims_files_has_a_band_case():
    assert calculators_in_claims_files() <= set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_inside_its_band_is_reproduced_and_outside_is_not(name):
    make, params, value = CASES[name]
    # two seeds of equal runs: the interval is the one value, so the band alone decides
    runs = seeded([*make(), *(replace(r, config={**r.config, "seed": 1}) for r in make())])
    margin = max(0.1 * abs(value), 0.05)
    inside = banded(name, params, value, value - margin, value + margin)
    (result,) = evaluate(inside, runs, "small")
    assert result.ours == pytest.approx(value)
    assert result.verdict == "reproduced"
    for low, high in ((value + margin, value + 2 * margin), (value - 2 * margin, value - margin)):
        (result,) = evaluate(banded(name, params, value, low, high), runs, "small")
        assert result.verdict == "not reproduced", (low, high)


CLAIM = {
    "id": "headline",
    "kind": "outcome",
    "source": "Abstract",
    "statement": "3x less time",
    "metric": {"calculator": "final_metric", "params": {"run": "sync", "metric": "train/loss"}},
    "published": 0.333,
    "unit": "x",
    "scales": ["small"],
}


@pytest.mark.parametrize(
    ("band", "message"),
    [
        (
            None,
            "claim 'headline': published 0.333 is a number but has no band; add band: "
            "{at_least and/or at_most, reason} around it",
        ),
        (
            {"at_least": 0.2, "at_most": 0.4},
            "claim 'headline': band has no reason; add band.reason saying why these bounds, "
            "from the paper's numbers and what the claim depends on",
        ),
        (
            {"reason": "published +- 20%"},
            "claim 'headline': band has no bound; give band.at_least and/or band.at_most",
        ),
        (
            {"at_least": 0.4, "at_most": 0.267, "reason": "published +- 20%"},
            "claim 'headline': band is inverted (at_least 0.4 > at_most 0.267); swap the bounds",
        ),
        (
            {"at_least": math.nan, "at_most": 0.4, "reason": "published +- 20%"},
            "claim 'headline': band.at_least=nan must be a finite number; give a finite bound "
            "or leave band.at_least out for no bound on that side",
        ),
        (
            {"at_least": 0.2, "at_most": math.inf, "reason": "published +- 20%"},
            "claim 'headline': band.at_most=inf must be a finite number; give a finite bound "
            "or leave band.at_most out for no bound on that side",
        ),
        (
            {"at_least": -math.inf, "reason": "published +- 20%"},
            "claim 'headline': band.at_least=-inf must be a finite number; give a finite bound "
            "or leave band.at_least out for no bound on that side",
        ),
    ],
)
def test_a_bad_band_is_refused_when_the_file_is_loaded(tmp_path, band, message):
    claim = dict(CLAIM) if band is None else {**CLAIM, "band": band}
    check_refused(tmp_path, claim, message)


def check_refused(tmp_path, claim, message, seed_cap=10):
    """The file is refused when loaded, and by `repro report`, with exactly `message` after
    the file's path, on one line."""
    data = {"paper": "adacomm", "title": "t", "citation": "c", "seed_cap": seed_cap}
    (tmp_path / "adacomm.yaml").write_text(yaml.safe_dump({**data, "claims": [claim]}))
    expected = f"{tmp_path / 'adacomm.yaml'}: {message}"
    with pytest.raises(UserError) as err:
        load_claims("adacomm", tmp_path)
    assert str(err.value) == expected and "\n" not in expected
    # `repro report` loads the file before reading any run
    with pytest.raises(UserError) as err:
        report_main(["adacomm", "--claims", str(tmp_path), "--runs", str(tmp_path / "none")])
    assert str(err.value) == expected


def test_the_shipped_claims_files_band_every_published_number():
    for paper in ("adacomm", "adasum", "topk"):
        for claim in load_claims(paper, CLAIMS_DIR).claims:
            numeric = isinstance(claim.published, int | float)
            assert (claim.band is not None) == numeric, (paper, claim.id)
            if numeric:
                assert claim.reproduced.holds(claim.published), (paper, claim.id)


BANDED = {**CLAIM, "band": {"at_least": 0.2, "at_most": 0.4, "reason": "published +- 20%"}}


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        (
            {k: v for k, v in BANDED.items() if k != "kind"},
            "claim 'headline': has no kind; set kind: outcome (a training result that could "
            "have come out otherwise) or kind: model_check (follows from the modeled clock or "
            "the rule itself)",
        ),
        (
            {**BANDED, "kind": "outcomes"},
            "claim 'headline': kind='outcomes' is not one of outcome, model_check; set kind: "
            "outcome (a training result that could have come out otherwise) or kind: "
            "model_check (follows from the modeled clock or the rule itself)",
        ),
        (
            {**BANDED, "verdict": {"partly": {"at_most": math.nan}}},
            "claim 'headline': verdict.partly: at_most=nan must be a finite number; give a "
            "finite bound or leave at_most out for no bound on that side",
        ),
        (
            {**BANDED, "seed_cap": 0},
            "claim 'headline': seed_cap=0 must be an integer >= 1: the most seeds a claim's "
            "runs get before an undecided verdict is called inconclusive (e.g. 10)",
        ),
        (
            {**BANDED, "magnitude": ["headline"]},
            "claim 'headline': magnitude names 'headline', which is not another claim of this "
            "file; name claims among headline",
        ),
    ],
)
def test_a_bad_kind_partly_bound_cap_or_magnitude_is_refused_when_loaded(tmp_path, claim, message):
    check_refused(tmp_path, claim, message)


def test_a_file_without_a_seed_cap_is_refused_when_loaded(tmp_path):
    data = {"paper": "adacomm", "title": "t", "citation": "c", "claims": [BANDED]}
    (tmp_path / "adacomm.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as err:
        load_claims("adacomm", tmp_path)
    assert str(err.value) == (
        f"{tmp_path / 'adacomm.yaml'}: seed_cap is missing; add seed_cap: N (e.g. 10), the "
        "most seeds a claim's runs get before an undecided verdict is called inconclusive, "
        "written before any result"
    )
