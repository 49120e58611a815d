"""Claims files: mistakes refused as user errors when loaded, and AdaComm's file judged on a
full synthetic run set."""

import shutil
from pathlib import Path

import pytest

from repro.claims.claims_file import ClaimsFile, load_claims
from repro.claims.verdicts import evaluate
from repro.errors import UserError
from tests.unit.report_data import adacomm_set, claim_dict, claims_file, seeded

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"


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
        ({"metric": "time_to_target_ratio"}, "metric='time_to_target_ratio' must be a mapping"),
        ({"scales": "small"}, "scales"),
        ({"unit": 5}, "unit=5 must be a text"),
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
        # a wrong type or pattern failed in a traceback after every run had finished
        (
            {
                "metric": {
                    "calculator": "time_to_target_ratio",
                    "params": {"run": "a", "reference": "b", "metric": "m", "target": "abc"},
                }
            },
            "params for 'time_to_target_ratio': target='abc' must be a number or null",
        ),
        (
            {
                "metric": {
                    "calculator": "trend",
                    "params": {
                        "where": "a.b",
                        "key": "k",
                        "metric": "m",
                        "direction": "increasing",
                    },
                }
            },
            "where='a.b' must be a mapping",
        ),
        (
            {
                "metric": {
                    "calculator": "step_time_ratio",
                    "params": {"pattern": "((x", "reference": "b"},
                }
            },
            r"pattern='\(\(x': missing \)",
        ),
        ({"verdict": {"partly": {"at_most": "0.4"}}}, "at_most='0.4' must be a number"),
        (
            {"band": {"at_most": "0.4", "reason": "r"}},
            "band.at_most='0.4' must be a number",
        ),
        # a NaN or infinite paper's value was accepted and shown as "undefined" on the page
        ({"published": float("nan")}, r"published=nan must be a finite number \(the paper's"),
        ({"published": float("inf")}, r"published=inf must be a finite number"),
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
            "adacomm", "t", "c", [], 10, [{"id": "f", "title": "t", "y": "a", "kind": "pie"}]
        )


def test_unknown_paper_lists_known(tmp_path):
    (tmp_path / "adacomm.yaml").write_text("paper: adacomm\n")
    (tmp_path / "topk.yaml").write_text("paper: topk\n")
    with pytest.raises(UserError, match="unknown paper 'nope'.*known papers: adacomm, topk"):
        load_claims("nope", tmp_path)
    with pytest.raises(UserError, match="missing key"):
        load_claims("adacomm", tmp_path)


def test_a_claims_file_for_a_paper_with_no_run_set_is_refused(tmp_path):
    # it was accepted: `repro report all` listed the paper as "not run; run it with
    # `repro reproduce other`", a command that refuses the paper
    shutil.copy(CLAIMS_DIR / "adacomm.yaml", tmp_path / "other.yaml")
    text = (tmp_path / "other.yaml").read_text().replace("paper: adacomm", "paper: other")
    (tmp_path / "other.yaml").write_text(text)
    with pytest.raises(UserError) as info:
        load_claims("other", tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'other.yaml'}: paper 'other' has no run set "
        "(configs/experiment/other_<scale>.yaml); name one of adacomm, adasum, topk or add "
        "its run set"
    )


def test_a_key_written_twice_in_a_claim_is_refused_naming_both_lines(tmp_path):
    shipped = (CLAIMS_DIR / "adacomm.yaml").read_text().splitlines()
    at = next(i for i, line in enumerate(shipped) if line.startswith("seed_cap:"))
    twice = [*shipped[: at + 1], shipped[at], *shipped[at + 1 :]]
    (tmp_path / "adacomm.yaml").write_text("\n".join(twice) + "\n")
    with pytest.raises(UserError) as info:
        load_claims("adacomm", tmp_path)
    lines = f"lines {at + 1} and {at + 2}"
    assert str(info.value) == (
        f"{tmp_path / 'adacomm.yaml'}: key seed_cap is written twice ({lines}); keep one"
    )


def test_adacomm_claims_file_on_a_full_run_set():
    cf = load_claims("adacomm", CLAIMS_DIR)
    assert cf.display_name("local_sgd_tau16") == "PASGD (τ = 16)"
    assert cf.display_name("sync") == "Fully synchronous SGD"
    # two seeds of equal runs: each interval is its one value
    runs = seeded([*adacomm_set(), *adacomm_set(seed=1)])
    res = {r.claim.id: r for r in evaluate(cf.claims, runs, "small")}
    assert set(res) == {c.id for c in cf.claims}
    assert {c.id for c in cf.claims if c.kind == "model_check"} == {
        "tau_decreases",
        "larger_tau_faster_per_step",
        "speedup_bound",
    }
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


def test_shipped_claims_name_their_kind_cap_and_magnitudes():
    files = {paper: load_claims(paper, CLAIMS_DIR) for paper in ("adacomm", "topk", "adasum")}
    checks = {p: {c.id for c in f.claims if c.kind == "model_check"} for p, f in files.items()}
    assert checks == {
        "adacomm": {"speedup_bound", "larger_tau_faster_per_step", "tau_decreases"},
        "topk": {
            "topk_faster_than_dense",
            "var_leader_cost",
            "ar_at_low_bandwidth_low_compression",
            "ag_at_high_bandwidth_high_compression",
        },
        "adasum": set(),  # the cost claim times real gloo collectives: an outcome
    }
    assert {f.seed_cap for f in files.values()} == {10}
    larger = next(c for c in files["topk"].claims if c.id == "larger_loss_at_c0001")
    assert larger.magnitude == [
        "ar_topk_loss_at_c0001",
        "ag_topk_loss_at_c0001",
        "small_loss_at_c01",
    ]


def test_the_shipped_claims_load_under_an_ascii_locale():
    """Their text holds non-ASCII letters; read in the locale's encoding (Python's UTF-8
    mode off, LC_ALL=C), `repro reproduce` stopped in a UnicodeDecodeError."""
    import os
    import subprocess
    import sys

    read = (
        "from pathlib import Path; from repro.claims.claims_file import load_claims; "
        "[load_claims(p, Path('reports/claims')) for p in ('adacomm', 'topk', 'adasum')]"
    )
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", read],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
