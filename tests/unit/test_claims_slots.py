"""Findings quote computed numbers by slot: filled from the runs when the report is
built, and refused when the claims file loads if they name nothing computed."""

import re
from pathlib import Path

import pytest
import yaml

from repro.claims.bootstrap import mean_interval
from repro.claims.claims_file import ClaimsFile, load_claims
from repro.claims.findings import findings_table
from repro.claims.verdicts import evaluate
from repro.errors import UserError
from tests.unit.report_data import claim_dict, make_run, seeded

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"
STEPS = {
    "calculator": "time_to_target_ratio",
    "params": {"run": "adacomm", "reference": "sync", "clock": "step"},
}


def three_seeds(crossings):
    """sync (loss 100/s, 1 s a step) and adacomm (loss c/s, 0.5 s a step) per seed: adacomm
    reaches sync's final loss 1 at step c, at c / 200 of sync's time and c / 100 of its
    steps."""
    runs = []
    for seed, c in enumerate(crossings):
        runs.append(make_run("sync", seed=seed))
        runs.append(make_run("adacomm", loss=lambda s, c=c: c / s, sec_per_step=0.5, seed=seed))
    return seeded(runs)


def claims(why, values=None):
    finding = {"claim": "headline", "scale": "small", "verdicts": ["undecided"], "why": why}
    if values is not None:
        finding["values"] = values
    other = claim_dict(id="other", verdict={"partly": {"at_most": 0.9}})
    return ClaimsFile(
        paper="adacomm",
        title="t",
        citation="c",
        seed_cap=10,
        claims=[claim_dict(), other],
        findings=[finding],
    )


def test_slots_are_filled_with_the_claims_and_named_values_per_seed():
    why = (
        "{per_seed:.2f} | {mean:.3f} | {ci} | {seeds} | {steps:.1f} | {steps.max} | "
        "{other.min} | {steps.mean:.2f}"
    )
    cf = claims(why, {"steps": STEPS})
    runs = three_seeds([60, 70, 90])
    results = evaluate(cf.claims, runs, "small")
    assert results[0].verdict == "undecided"  # 0.3 .. 0.45 straddles the band's 0.4
    row = findings_table(cf.findings, results, "small", runs).rows[0]
    interval = mean_interval([0.3, 0.35, 0.45])
    ci = f"[{interval.low:.4g}, {interval.high:.4g}]"
    assert row == [
        "headline",
        "undecided at 3 seeds",
        f"0.30 / 0.35 / 0.45 | 0.367 | {ci} | 3 | 0.6 / 0.7 / 0.9 | 0.9 | 0.3 | 0.73",
    ]


def test_the_seed_count_is_filled_in_its_format():
    # the format of {seeds} was dropped: "{seeds:>3}" gave "3"
    cf = claims("[{seeds:>3}] [{steps.seeds:03d}]", {"steps": STEPS})
    runs = three_seeds([60, 70, 90])
    row = findings_table(cf.findings, evaluate(cf.claims, runs, "small"), "small", runs).rows[0]
    assert row[2] == "[  3] [003]"


def test_a_named_value_that_cannot_be_computed_says_so():
    lost = {"calculator": "final_metric", "params": {"run": "ghost", "metric": "train/loss"}}
    cf = claims("ghost: {lost}", {"lost": lost})
    runs = three_seeds([60, 70, 90])
    row = findings_table(cf.findings, evaluate(cf.claims, runs, "small"), "small", runs).rows[0]
    assert row[2].startswith("ghost: (not measured: no run labelled 'ghost'")


def test_a_named_value_is_computed_at_the_seeds_its_runs_have():
    """Seeds added to other runs (another claim's extension) are not this value's seeds."""
    runs = three_seeds([60, 70, 90])
    runs["other_run"] = {seed: make_run("other_run", seed=seed) for seed in range(5)}
    final = {"calculator": "final_metric", "params": {"run": "adacomm", "metric": "train/loss"}}
    cf = claims("{final.seeds}: {final}", {"final": final})
    row = findings_table(cf.findings, evaluate(cf.claims, runs, "small"), "small", runs).rows[0]
    assert row[2].startswith("3: ") and "not measured" not in row[2]


def test_a_named_value_lines_up_with_the_seeds_its_claim_was_judged_on():
    """A value's run that another claim extended to five seeds is listed at the claim's
    three, so that its values and the claim's pair seed by seed."""
    runs = three_seeds([60, 70, 90])
    runs["extended"] = {
        seed: make_run("extended", loss=lambda s, k=seed: (k + 1) / s, seed=seed)
        for seed in range(5)
    }
    final = {"calculator": "final_metric", "params": {"run": "extended", "metric": "train/loss"}}
    cf = claims("{per_seed:.2f} against {final:.4f} ({final.seeds})", {"final": final})
    results = evaluate(cf.claims, runs, "small")
    assert sorted(results[0].per_seed) == [0, 1, 2]
    row = findings_table(cf.findings, results, "small", runs).rows[0]
    last = runs["extended"][0].history[-1]["step"]
    expected = " / ".join(f"{(k + 1) / last:.4f}" for k in range(3))
    assert row[2] == f"0.30 / 0.35 / 0.45 against {expected} (3)"


def _load_with_why(tmp_path: Path, why: str) -> ClaimsFile:
    """A claims file whose one finding's text is `why`, loaded as a report loads it."""
    cf = claims("fine", {"steps": STEPS})
    data = {
        "paper": "adacomm",
        "title": "t",
        "citation": "c",
        "seed_cap": 10,
        "claims": [claim_dict(), claim_dict(id="other")],
        "findings": [{**vars(cf.findings[0]), "why": why}],
    }
    (tmp_path / "adacomm.yaml").write_text(yaml.safe_dump(data))
    return load_claims("adacomm", tmp_path)


@pytest.mark.parametrize(
    ("why", "named"),
    [
        ("{median}", "{median}"),
        ("{steps.median}", "{steps.median}"),
        ("{nobody.mean}", "{nobody.mean}"),
        ("{headline.per_seed} then {typo}", "{typo}"),
    ],
)
def test_a_slot_naming_nothing_computed_is_refused_when_loaded(tmp_path, why, named):
    with pytest.raises(UserError) as err:
        _load_with_why(tmp_path, why)
    assert str(err.value) == (
        f"{tmp_path / 'adacomm.yaml'}: claim 'headline': finding at scale small: slot "
        f"{named} names no computed value; use {{FIELD}} for the claim's own, "
        "{CLAIM_ID.FIELD} or {NAME.FIELD} for a name under values, FIELD one of per_seed, "
        "mean, low, high, ci, min, max, seeds"
    )


@pytest.mark.parametrize(
    ("why", "says"),
    [
        # a format no float has failed the report; braces no slot matched stayed as typed
        ("{mean:.3q}", "slot {mean:.3q}: Unknown format code 'q'"),
        ("{Mean:.3f} of it", "{Mean:.3f} is no slot: a slot is {ref} or {ref.field} in lower"),
        ("{local-loss}", "{local-loss} is no slot"),
        # the seed count's format was never checked, and ignored when filled
        ("{seeds:.2q}", "slot {seeds:.2q}: Unknown format code 'q' for object of type 'int'"),
    ],
)
def test_a_slot_that_formats_nothing_or_braces_that_are_none_are_refused(tmp_path, why, says):
    with pytest.raises(UserError, match=re.escape(says)):
        _load_with_why(tmp_path, why)


def test_braces_of_prose_and_the_seed_counts_format_are_left_alone(tmp_path):
    assert _load_with_why(tmp_path, "the sets {sync, local_sgd} ran {seeds:d} seeds").findings


def test_shipped_findings_load_and_refer_to_nothing_outside_the_project():
    for paper in ("adacomm", "topk", "adasum"):
        for finding in load_claims(paper, CLAIMS_DIR).findings:
            assert not re.search(r"\bissue\b|#\d", finding.why, re.I), (paper, finding.claim)
