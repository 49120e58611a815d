"""A claim's terms recorded as its runs begin, and a claim whose terms moved since not
assessed on those runs (bands are fixed before results and never moved after)."""

import json
import shutil

import pytest
import yaml

from repro.claims.claims_file import load_claims
from repro.claims.fixed_terms import TERMS_FILE, moved, record
from repro.claims.verdicts import evaluate
from repro.errors import UserError
from repro.report.report_cli import main as report_main
from repro.report.summary import plain_verdict
from tests.unit.report_data import (
    HEADLINE_BAND,
    adacomm_set,
    as_set_runs,
    claim_dict,
    claims_file,
    write_offline_runs,
)
from tests.unit.test_more_seeds import runs_with
from tests.unit.test_report_build import CLAIMS_DIR


def _claims(**over):
    return claims_file([claim_dict(**over)]).claims


def test_a_band_moved_after_the_runs_began_leaves_the_claim_not_assessed(tmp_path):
    runs = runs_with([60, 70, 72])  # ratios 0.3, 0.35, 0.36: inside the band [0.267, 0.4]
    record(_claims(), tmp_path)
    assert moved(_claims(), tmp_path) == {}
    (kept,) = evaluate(_claims(), runs, "small", moved=moved(_claims(), tmp_path))
    assert kept.verdict == "reproduced"

    wider = {**HEADLINE_BAND, "at_most": 0.5}
    shift = moved(_claims(band=wider), tmp_path)
    (when,) = {
        e["recorded"] for e in json.loads((tmp_path / TERMS_FILE).read_text())["claims"].values()
    }
    old, new = json.dumps(HEADLINE_BAND["at_most"]), json.dumps(0.5)
    assert shift["headline"].startswith('band was {"at_least": 0.267, "at_most": ' + old)
    assert shift["headline"].endswith(f'"at_most": {new}}}; recorded {when}')
    (result,) = evaluate(_claims(band=wider), runs, "small", moved=shift)
    assert (result.verdict, result.ours, result.per_seed) == (
        "not assessed",
        kept.ours,
        kept.per_seed,
    )
    assert plain_verdict(result) == (
        f"not assessed: its terms moved after its runs began ({shift['headline']}); new terms "
        "are judged on runs made afresh (another runs_root)"
    )
    # the other terms: the published number, the metric, the seed cap, the scales, the kind
    for over in (
        {"published": 0.25},
        {"metric": {**claim_dict()["metric"], "params": {"run": "adacomm", "reference": "x"}}},
        {"seed_cap": 5},
        {"scales": ["small", "paper"]},
        {"kind": "model_check"},
    ):
        (key,) = over
        assert moved(_claims(**over), tmp_path)["headline"].startswith(f"{key} was "), key


def test_words_about_a_claim_may_change_and_a_record_is_never_rewritten(tmp_path):
    record(_claims(), tmp_path)
    written = (tmp_path / TERMS_FILE).read_bytes()
    reworded = _claims(
        statement="other words", source="Fig. 2", unit="x", band={**HEADLINE_BAND, "reason": "why"}
    )
    assert moved(reworded, tmp_path) == {}
    record(_claims(published=0.2), tmp_path)  # moved: the record keeps the terms it had
    assert (tmp_path / TERMS_FILE).read_bytes() == written
    added = claims_file([claim_dict(), claim_dict(id="second", published=0.2)]).claims
    record(added, tmp_path)  # a claim the file gained is recorded at the next reproduction
    data = json.loads((tmp_path / TERMS_FILE).read_text())["claims"]
    assert data["second"]["terms"]["published"] == 0.2 and moved(added, tmp_path) == {}


@pytest.mark.parametrize("text", ["{not json", "[]", '{"claims": 3}'])
def test_a_damaged_record_is_one_line(tmp_path, text):
    (tmp_path / TERMS_FILE).write_text(text)
    with pytest.raises(UserError, match=f"^{tmp_path / TERMS_FILE} cannot be read .*restore it"):
        moved(_claims(), tmp_path)


@pytest.mark.parametrize("given", ["runs/adacomm_small", "."])
def test_a_report_given_the_sets_folder_or_one_above_the_root_finds_the_record(tmp_path, given):
    """`--runs runs/adacomm_small` or `--runs .` reads the same runs as `--runs runs`; the
    record beside them was missed and a band moved since judged them as reproduced."""
    set_dir = tmp_path / "runs" / "adacomm_small"
    write_offline_runs(set_dir, as_set_runs(adacomm_set()))
    claims_dir = tmp_path / "claims"
    shutil.copytree(CLAIMS_DIR, claims_dir)
    record(load_claims("adacomm", claims_dir).claims, set_dir)
    data = yaml.safe_load((claims_dir / "adacomm.yaml").read_text())
    data["claims"][0]["band"]["at_least"] = 0.001
    (claims_dir / "adacomm.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "reports"
    argv = ["adacomm", "--runs", str(tmp_path / given), "--out", str(out)]
    assert report_main([*argv, "--claims", str(claims_dir)]) == 0
    page = (out / "adacomm" / "report.md").read_text()
    assert "not assessed: its terms moved after its runs began (band was" in page
