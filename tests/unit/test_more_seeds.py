"""Which runs get another seed, and why; what the extension can add at most; and a seed cap
below the experiment's default seeds refused by `repro reproduce` and `repro report`."""

from pathlib import Path

import pytest
import yaml

from repro.claims.claims_file import ClaimsFile
from repro.claims.reads import check_labels_made
from repro.claims.seed_caps import check_caps_for_scale
from repro.claims.verdicts import evaluate
from repro.cluster.launcher import expected_time
from repro.errors import UserError
from repro.reproduce.more_seeds import RUN_START_S, measured_minutes, most_added, wanted
from repro.reproduce.run_sets import run_set
from tests.helpers import repro_cli
from tests.unit.report_data import claim_dict, make_run, seeded

REPO = Path(__file__).resolve().parents[2]


def runs_with(crossings):
    """sync and adacomm (crossing sync's final loss at step c: ratio c / 200) per seed, and
    adacomm_lrdecay at seed 0 only."""
    runs = [make_run("adacomm_lrdecay", loss=lambda s: 50 / s, sec_per_step=0.5)]
    for seed, c in enumerate(crossings):
        runs.append(make_run("sync", seed=seed))
        runs.append(make_run("adacomm", loss=lambda s, c=c: c / s, sec_per_step=0.5, seed=seed))
    return seeded(runs)


def claims(cap=10, kind="outcome"):
    headline = claim_dict(verdict={"partly": {"at_most": 0.9}}, seed_cap=cap, kind=kind)
    return ClaimsFile(paper="adacomm", title="t", citation="c", seed_cap=10, claims=[headline])


def test_an_undecided_claim_gets_the_next_seed_of_its_own_runs_only():
    runs = runs_with([60, 70, 90])  # 0.3, 0.35, 0.45: the interval straddles the band's 0.4
    results = evaluate(claims().claims, runs, "small")
    pairs, why = wanted(results, runs)
    assert pairs == {("sync", 3), ("adacomm", 3)}
    (line,) = why
    assert line.startswith("claim headline: 95% CI [")
    assert line.endswith("] straddles 0.4 at 3 seeds (cap 10): adding seed 3 of adacomm, sync")


def test_decided_capped_and_model_check_claims_get_none():
    assert wanted(evaluate(claims().claims, runs_with([60, 70, 80]), "small"), {}) == (set(), [])
    at_cap = evaluate(claims(cap=3).claims, runs_with([60, 70, 90]), "small")
    assert at_cap[0].verdict == "inconclusive" and wanted(at_cap, {}) == (set(), [])
    check = evaluate(claims(kind="model_check").claims, runs_with([60, 70, 90]), "small")
    assert wanted(check, {}) == (set(), [])


def test_the_most_the_extension_adds_is_each_read_label_up_to_its_largest_cap():
    runs = run_set("adacomm", "tiny", [])
    cf = claims(cap=4)
    text = most_added(cf, runs, "tiny", 0.5)
    assert text == "; no claim here can add seeds"  # the claim is stated for small only
    tiny = ClaimsFile(
        paper="adacomm",
        title="t",
        citation="c",
        seed_cap=10,
        claims=[claim_dict(scales=["tiny"], seed_cap=4)],
    )
    by_label = {cfg.experiment.label: cfg for _, cfg in runs}
    # one default seed; sync and adacomm up to 4 seeds: 3 more of each
    extra = [(label, by_label[label]) for label in ("adacomm", "sync") for _ in range(3)]
    line = expected_time(extra, 0.5).removeprefix("expected time: ")
    assert most_added(tiny, runs, "tiny", 0.5) == (
        f"; seeds added where a claim stays undecided: at most {line}"
    )
    assert "6 runs to do" in line
    # a set whose minutes were never measured (the paper scale here) says only how many
    assert most_added(tiny, runs, "tiny", 0.0) == (
        "; seeds added where a claim stays undecided: at most 6 more runs"
    )


def test_a_labels_measured_minutes_are_its_seeds_mean_last_wall_time_plus_start():
    runs = seeded(
        [
            make_run("sync", sec_per_step=3.0, steps=[10, 20]),  # last time/wall_s 120
            make_run("sync", sec_per_step=6.0, steps=[10, 20], seed=1),  # 240
            make_run("adacomm", sec_per_step=1.0, steps=[10, 30, 40]),  # 80
            make_run("never_logged", extra=lambda s: {"time/wall_s": float("nan")}),
        ]
    )
    assert measured_minutes(runs) == {
        "sync": pytest.approx((180 + RUN_START_S) / 60),
        "adacomm": pytest.approx((80 + RUN_START_S) / 60),
    }


def test_a_seed_cap_below_the_default_seeds_is_one_line_before_any_run(tmp_path):
    data = yaml.safe_load((REPO / "reports" / "claims" / "adacomm.yaml").read_text())
    data["seed_cap"] = 2  # adacomm_small runs 3 seeds by default
    (tmp_path / "adacomm.yaml").write_text(yaml.safe_dump(data))
    path = tmp_path / "adacomm.yaml"
    line = (
        f"error: {path}: claim 'headline_time_to_sync_loss': seed_cap 2 is below experiment "
        "adacomm_small's default seeds (3); raise the file's seed_cap to at least 3"
    )
    runs = tmp_path / "runs"
    proc = repro_cli("reproduce", "adacomm", f"runs_root={runs}", "--claims", str(tmp_path))
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line + "\n", "")
    assert not runs.exists()


def test_a_claim_naming_a_run_its_set_does_not_make_is_one_line_before_any_run(tmp_path):
    """A claim reading label `synk` (a typo of sync): its report could only say the run is
    missing, after all the set's runs. Runs the command line drops are the user's choice."""
    data = yaml.safe_load((REPO / "reports" / "claims" / "adacomm.yaml").read_text())
    data["claims"][0]["metric"]["params"]["reference"] = "synk"
    (tmp_path / "adacomm.yaml").write_text(yaml.safe_dump(data))
    runs = tmp_path / "runs"
    proc = repro_cli("reproduce", "adacomm", f"runs_root={runs}", "--claims", str(tmp_path))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith(
        f"error: {tmp_path / 'adacomm.yaml'}: claim 'headline_time_to_sync_loss' reads synk, "
        "which run set adacomm_small does not make (it makes adacomm, adacomm_lrdecay, "
    ) and proc.stderr.endswith("add them to configs/experiment/adacomm_small.yaml\n")
    assert not runs.exists()
    # only a label a claim names is checked here: a typo of a where-selection is the report's
    claims = ClaimsFile(**data).claims
    check_labels_made(claims, "tiny", ["adacomm", "sync"], "x", "f")  # no claim at this scale
    with pytest.raises(UserError, match="reads synk"):
        check_labels_made(claims, "small", ["adacomm", "adacomm_lrdecay", "sync"], "x", "f")


def test_a_report_refuses_a_seed_cap_below_its_scales_default_seeds():
    data = yaml.safe_load((REPO / "reports" / "claims" / "adacomm.yaml").read_text())
    cf = ClaimsFile(**{**data, "seed_cap": 2})
    check_caps_for_scale(cf, "tiny", Path("adacomm.yaml"))  # the tiny scale runs one seed
    with pytest.raises(UserError) as err:
        check_caps_for_scale(cf, "small", Path("adacomm.yaml"))
    assert str(err.value) == (
        "adacomm.yaml: claim 'headline_time_to_sync_loss': seed_cap 2 is below experiment "
        "adacomm_small's default seeds (3); raise the file's seed_cap to at least 3"
    )
    own = {**data, "claims": [{**data["claims"][0], "seed_cap": 1}, *data["claims"][1:]]}
    with pytest.raises(UserError, match="raise the claim's seed_cap to at least 3"):
        check_caps_for_scale(ClaimsFile(**own), "small", Path("adacomm.yaml"))
