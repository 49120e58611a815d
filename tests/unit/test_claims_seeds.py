"""Claims judged on the seeds' mean and its 95% bootstrap interval: reproduced inside the
band, undecided across an edge (inconclusive at the seed cap); reports list every seed."""

import dataclasses
import math
import re
from pathlib import Path

import pytest

from repro.claims.claims_file import ClaimsFile, load_claims
from repro.claims.figure_specs import FigureSpec
from repro.claims.verdicts import evaluate, magnitude_text
from repro.report.build import render_parts, select_runs
from repro.report.compare import curves, figure
from repro.report.plots import draw_figure, seeds_sentence
from repro.report.summary import plain_verdict
from repro.track.series import at_seed, every_run, seeds_of
from tests.unit.report_data import adacomm_set, claim_dict, make_run, seeded

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"


def headline() -> ClaimsFile:
    claim = claim_dict(verdict={"partly": {"at_most": 0.9}})
    return ClaimsFile(paper="adacomm", title="t", citation="c", seed_cap=10, claims=[claim])


def three_seeds(crossings: list[int]):
    """sync (loss 100/s, 1 s per step) and adacomm (loss c/s, 0.5 s per step) for seeds 0, 1,
    2: sync ends at loss 1 at step 100 (100 s); adacomm reaches loss 1 at step c, at c / 2 s,
    so its ratio is c / 200 (inf when c > 100: never within its 100 steps)."""
    runs = []
    for seed, c in enumerate(crossings):
        runs.append(make_run("sync", seed=seed))
        runs.append(make_run("adacomm", loss=lambda s, c=c: c / s, sec_per_step=0.5, seed=seed))
    return seeded(runs)


@pytest.mark.parametrize(
    ("crossings", "verdict", "values"),
    [
        ([60, 70, 80], "reproduced", [0.3, 0.35, 0.4]),  # interval within 0.3 .. 0.4
        ([60, 70, 90], "undecided", [0.3, 0.35, 0.45]),  # it straddles the band's 0.4
        ([90, 90, 100], "partly", [0.45, 0.45, 0.5]),
        ([40, 40, 40], "partly", [0.2, 0.2, 0.2]),  # below the band, within partly
        ([60, 60, 200], "undecided", [0.3, 0.3, math.inf]),  # seed 2 never gets there
        ([200, 200, 200], "not reproduced", [math.inf] * 3),
    ],
)
def test_verdict_over_seeds(crossings, verdict, values):
    (result,) = evaluate(headline().claims, three_seeds(crossings), "small")
    assert result.verdict == verdict
    assert list(result.per_seed) == [0, 1, 2]
    assert list(result.per_seed.values()) == pytest.approx(values)
    assert result.ours == pytest.approx(sum(values) / 3)
    # a bootstrap mean of three values lies between their least and their greatest
    assert min(values) <= result.interval.low <= result.interval.high <= max(values)
    reached = "never reached by adacomm;" if math.isinf(values[0]) else "reached by adacomm at"
    assert result.note.startswith(f"mean of 3 seeds; seed 0: train/loss 1 {reached}")


def test_every_seed_is_listed_and_undecided_names_its_seeds():
    (result,) = evaluate(headline().claims, three_seeds([60, 70, 90]), "small")
    assert result.per_seed_text() == "seed 0: 0.3; seed 1: 0.35; seed 2: 0.45"
    assert result.verdict_text() == "undecided at 3 seeds" and result.edge == 0.4


def test_at_the_cap_an_undecided_claim_is_inconclusive_with_its_interval():
    claims = ClaimsFile(
        paper="adacomm",
        title="t",
        citation="c",
        seed_cap=10,
        claims=[claim_dict(verdict={"partly": {"at_most": 0.9}}, seed_cap=3)],
    ).claims
    (result,) = evaluate(claims, three_seeds([60, 70, 90]), "small")
    low, high = result.interval.low, result.interval.high
    assert result.verdict == "inconclusive"
    assert result.verdict_text() == f"inconclusive at 3 seeds, CI [{low:.4g}, {high:.4g}]"


@pytest.mark.parametrize(("cap", "says"), [(3, "its seed cap"), (2, "past its seed cap of 2")])
def test_the_summary_says_whether_an_inconclusive_claim_is_at_its_cap_or_past_it(cap, says):
    # three seeds run against a cap of 2 were said to be "3 seeds (its seed cap)"
    claims = ClaimsFile(
        paper="adacomm",
        title="t",
        citation="c",
        seed_cap=10,
        claims=[claim_dict(verdict={"partly": {"at_most": 0.9}}, seed_cap=cap)],
    ).claims
    (result,) = evaluate(claims, three_seeds([60, 70, 90]), "small")
    low, high = result.interval.low, result.interval.high
    assert (
        plain_verdict(result) == f"inconclusive at 3 seeds ({says}), 95% CI [{low:.4g}, {high:.4g}]"
    )


def test_one_seed_has_no_interval_and_is_undecided():
    runs = three_seeds([60])
    (result,) = evaluate(headline().claims, runs, "small")
    assert result.interval is None and result.verdict == "undecided"
    assert result.ours_text("x") == "0.3 x"


def test_an_undefined_seed_is_not_reproduced():
    claim = claim_dict(
        metric={
            "calculator": "time_to_target_ratio",
            "params": {"run": "adacomm", "reference": "sync", "target": 0.001},
        }
    )
    cf = ClaimsFile(paper="adacomm", title="t", citation="c", seed_cap=10, claims=[claim])
    (result,) = evaluate(cf.claims, three_seeds([60, 70, 80]), "small")
    assert all(math.isnan(v) for v in result.per_seed.values())
    assert result.verdict == "not reproduced" and result.interval is None


def test_a_seed_missing_a_run_is_not_run_and_named():
    runs = three_seeds([60, 70, 80])
    del runs["adacomm"][1]
    (result,) = evaluate(headline().claims, runs, "small")
    assert result.verdict == "not run" and result.ours is None
    assert result.note.startswith("seed 1: no run labelled 'adacomm'")
    assert seeds_of(runs) == [0, 1, 2] and set(at_seed(runs, 1)) == {"sync"}


def test_not_assessed_still_shows_the_mean_and_each_seed():
    (result,) = evaluate(headline().claims, three_seeds([60, 70, 80]), "tiny")
    assert result.verdict == "not assessed" and result.ours == pytest.approx(0.35)
    assert result.per_seed_text() == "seed 0: 0.3; seed 1: 0.35; seed 2: 0.4"


def test_select_runs_keeps_every_seed_of_a_label():
    runs = [*adacomm_set(), *(make_run(r.name, seed=1) for r in adacomm_set())]
    runs.append(make_run("sync", seed=1, run_id="older", exit_code=None))
    _, chosen, notes, _ = select_runs(runs, "adacomm", None, "runs")
    assert {label: list(by_seed) for label, by_seed in chosen.items()} == {
        label: [0, 1] for label in ("adacomm", "adacomm_lrdecay", "local_sgd_tau4")
    } | {"local_sgd_tau16": [0, 1], "sync": [0, 1]}
    assert chosen["sync"][1].run_id == "id-sync-s1"
    assert notes == ["several runs labelled 'sync' with seed 1: kept run id-sync-s1"]
    assert [(label, seed) for label, seed, _ in every_run(chosen)][:2] == [
        ("adacomm", 0),
        ("adacomm", 1),
    ]


def test_report_shows_per_seed_values_every_seed_run_and_figure_captions(tmp_path):
    """The AdaComm claims file on two seeds: at seed 1 AdaComm takes 0.5 s per step."""
    seed1 = [run for run in adacomm_set(seed=1) if run.name != "adacomm"]
    tau = next(r for r in adacomm_set() if r.name == "adacomm").history
    slower = make_run(
        "adacomm",
        loss=lambda s: 80 / s,
        sec_per_step=0.5,
        method={"name": "adacomm", "tau0": 16},
        extra=lambda s: {"method/tau": tau[s // 10 - 1]["method/tau"]},
        seed=1,
    )
    claims = load_claims("adacomm", CLAIMS_DIR)
    _, runs, _, _ = select_runs([*adacomm_set(), *seed1, slower], "adacomm", None, "runs")
    render_parts(claims, runs, "small", tmp_path, command="x")
    html = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| headline_time_to"))
    # seed 0: 0.225 as in the one-seed report; seed 1 reaches the target at step 90 at
    # 0.5 s per step, 45 s of sync's 100: 0.45. The bootstrap of two values resamples
    # (a, a) and (b, b) a quarter of the time each, so its 2.5 and 97.5 percentiles are
    # exactly the two values: the interval [0.225, 0.45] straddles the band's 0.267.
    cells = "| 0.3375 x sync's time (95% CI [0.225, 0.45]) | seed 0: 0.225; seed 1: 0.45 |"
    assert f"{cells} undecided at 2 seeds |" in row
    assert "band 0.267 to 0.4:" in row
    assert "Seeds: 2." in md and "| seeds | 2 (0, 1) |" in md
    metrics = md.split("## Final metrics per run and seed")[1]
    rows = [line.split(" | ")[1:3] for line in metrics.splitlines() if line.startswith("| ")]
    assert rows[1:3] == [["sync", "0"], ["sync", "1"]] and len(rows) == 1 + 10
    assert "2 seeds (0, 1): faint lines are the seeds; the thick line is their mean" in html
    assert all((tmp_path / src).is_file() for src in re.findall(r'<img src="([^"]+)"', html))


def test_points_figure_draws_each_seed_and_the_mean(tmp_path):
    # test/acc = s / 100 reaches 0.5 at step 50; seed 1 of b32 never does (its runs end at 40)
    runs = [make_run(f"b{b}", config={"trainer": {"batch_size": b}}) for b in (16, 32)]
    runs += [make_run("b16", seed=1), make_run("b32", seed=1, steps=[10, 20, 30, 40])]
    spec = FigureSpec(
        id="pts",
        title="Steps to target",
        x="trainer.batch_size",
        y="test/acc",
        kind="points",
        measure={"calculator": "steps_to_target", "params": {"target": 0.5}},
    )
    assert draw_figure(spec, seeded(runs), str, tmp_path / "pts.png").stat().st_size > 1000
    assert seeds_sentence(spec, seeded(runs), str) == (
        "2 seeds (0, 1): a small dot per seed; the line joins the means over the seeds and "
        "the shaded band spans the lowest to the highest seed (no mean where a seed never "
        "got there)."
    )
    curves = FigureSpec(id="c", title="Accuracy", y="test/acc")
    assert seeds_sentence(curves, seeded(runs[:2]), str) == "One seed (0)."


def test_compare_names_the_seed_of_runs_that_share_a_label():
    runs = [make_run("sync"), make_run("sync", seed=1), make_run("adacomm")]
    drawn, _ = curves(runs, "train/loss", "step")
    assert [c.name for c in drawn] == [
        "Fully synchronous SGD, seed 0",
        "Fully synchronous SGD, seed 1",
        "AdaComm",
    ]


def test_compare_names_a_sweeps_trials_by_their_number():
    """A sweep's trials share label and seed: the legend says which trial each curve is."""
    trials = [
        dataclasses.replace(make_run("topk", run_id=f"t{n}", group="tiny"), tags=[f"trial:{n}"])
        for n in (0, 3)
    ]
    drawn, _ = curves([*trials, make_run("sync")], "train/loss", "step")
    assert [c.name for c in drawn] == [
        "tiny: topk, trial 0",
        "tiny: topk, trial 3",
        "adacomm_small: Fully synchronous SGD",
    ]


def test_compare_names_runs_of_one_label_and_seed_by_the_settings_they_differ_in():
    """A `--multirun` over one setting makes runs of one label and seed: the legend names the
    setting (not where a run was kept, nor what made it), and the run id only where nothing
    tells them apart."""
    tau = [
        make_run(
            "local_sgd",
            run_id=f"r{t}",
            method={"name": "local_sgd", "tau": t},
            config={
                "run_dir": f"runs/x{t}",
                "tracking": {"mode": f"m{t}"},
                "environment": {"machine": f"cpu {t}", "data": f"sha256 {t}"},
            },
        )
        for t in (1, 4)
    ]
    again = [make_run("sync", run_id="a"), make_run("sync", run_id="b")]
    drawn, _ = curves([*tau, *again], "train/loss", "step")
    assert [c.name for c in drawn] == [
        "PASGD, seed 0, method.tau=1",
        "PASGD, seed 0, method.tau=4",
        "Fully synchronous SGD, seed 0 (a)",
        "Fully synchronous SGD, seed 0 (b)",
    ]
    # drawn apart too: one colour per method, so a marker per setting; runs that differ in
    # nothing but where they were kept, or their seed, share the plain line
    seeds = [make_run("sync", run_id="s1", seed=1)]
    drawn, _ = curves([*tau, *again, *seeds], "train/loss", "step")
    lines = figure(drawn, "train/loss", "step", logy=False).axes[0].lines
    assert [line.get_marker() for line in lines] == ["None", "s", "None", "None", "None"]


def test_compare_marks_a_run_logged_once_so_that_it_shows():
    """A short run logs one point, which a line alone does not draw: it gets a marker, and
    runs with a curve stay lines."""
    runs = [make_run("sync", steps=[20]), make_run("adacomm")]
    drawn, _ = curves(runs, "train/loss", "step")
    once, curve = figure(drawn, "train/loss", "step", logy=False).axes[0].lines
    assert (len(once.get_xdata()), once.get_marker()) == (1, "o")
    assert len(curve.get_xdata()) > 1 and curve.get_marker() in ("None", None, "")


def test_a_direction_claim_row_names_a_failed_magnitude_claim():
    """A direction claim (AdaComm at most sync's time) holds on every seed while the banded
    magnitude claim on the same runs lies above its band: the row says so with that claim's
    value and band."""
    direction = claim_dict(
        id="faster",
        published="faster than sync",
        band=None,
        verdict={"reproduced": {"at_most": 1.0}},
        magnitude=["headline"],
    )
    cf = ClaimsFile(
        paper="adacomm",
        title="t",
        citation="c",
        seed_cap=10,
        claims=[claim_dict(verdict={"partly": {"at_most": 0.9}}), direction],
    )
    headline, faster = evaluate(cf.claims, three_seeds([90, 90, 100]), "small")
    assert (headline.verdict, faster.verdict) == ("partly", "reproduced")
    interval = headline.interval
    assert faster.verdict_text() == (
        "reproduced; magnitude not reproduced: headline partly: 0.4667 x sync's time "
        f"(95% CI [{interval.low:.4g}, {interval.high:.4g}]), band 0.267 to 0.4"
    )
    decided = evaluate(cf.claims, three_seeds([60, 70, 80]), "small")[1]
    assert decided.verdict_text() == "reproduced"  # the magnitude claim reproduced: nothing
    # not judged (its run missing): it says nothing of the magnitude, not "not reproduced"
    for unjudged in ("not run", "not measured", "not assessed"):
        missing = dataclasses.replace(headline, verdict=unjudged)
        assert magnitude_text(faster, {"headline": missing}) == ""


def test_a_model_check_is_judged_on_its_worst_seed_and_lists_each_seeds_verdict():
    check = claim_dict(kind="model_check", verdict={"partly": {"at_most": 0.9}})
    cf = ClaimsFile(paper="adacomm", title="t", citation="c", seed_cap=10, claims=[check])
    (result,) = evaluate(cf.claims, three_seeds([60, 70, 90]), "small")
    assert result.verdict == "partly" and result.interval is None
    # a model check holds or not, in the detailed tables as in the summary
    assert result.verdict_text() == "partly holds"
    assert result.per_seed_text() == (
        "seed 0: 0.3 (holds); seed 1: 0.35 (holds); seed 2: 0.45 (partly holds)"
    )


def test_report_lead_counts_seeds_per_run_where_seeds_were_added():
    from repro.report.page import seed_counts

    three, ten = dict.fromkeys(range(3)), dict.fromkeys(range(10))
    assert seed_counts({"dense": three, "sgd": three}) == "3"
    # added seeds went to one label: "10" would overstate the other two
    assert seed_counts({"dense": three, "sgd": three, "toy": ten}) == "3 for 2 labels, 10 for 1"
