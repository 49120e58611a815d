"""Missing runs on a paper's report page: each named once with the command and seeds that
make it, a run cut short or lost between seeds not judged as if whole, a ladder's missing
rung, a run made without a tracker. Synthetic AdaComm runs at two equal seeds
(tests/unit/report_data.py)."""

from pathlib import Path

import yaml

from repro.claims.claims_file import ClaimsFile, load_claims
from repro.claims.set_regime import set_settings
from repro.claims.verdicts import evaluate
from repro.locks import RUN_LOCK
from repro.pages.writer import Page, to_html, to_markdown
from repro.report.missing_runs import missing_notes, needed_missing
from repro.track.runs import STOPPED
from tests.unit.report_data import adacomm_set, in_directories, make_run, seeded
from tests.unit.test_report_page import CLAIMS_DIR, _md_rows, _page, _runs


def test_missing_runs_are_named_once_with_the_command_that_makes_them(tmp_path):
    runs = _runs(tmp_path, drop=("adacomm_lrdecay",))
    _, results, page, _ = _page(tmp_path, runs)
    md, html = to_markdown(page), to_html(page)
    verdict = {r.claim.id: r.verdict for r in results}
    assert verdict["headline_lrdecay_time_to_sync_loss"] == "not run"
    assert md.count("repro reproduce adacomm scale=small") == 1
    assert (
        "Runs missing: adacomm_lrdecay (read by claim headline_lrdecay_time_to_sync_loss). "
        "Make them with `repro reproduce adacomm scale=small`." in md
    )
    assert html.count('<p class="missing">') == 1 and "Not in the adacomm_small" not in md
    # the claim's own row names the label it lacks instead of linking it
    row = next(r for r in _md_rows(md, "Claims") if r[0] == "headline_lrdecay_time_to_sync_loss")
    assert row[-1].endswith("; adacomm_lrdecay (no run)")


def _seeds_without(tmp_path: Path, seeds: int, *lost: tuple[str, int]):
    """`seeds` seeds of the AdaComm set, each run in its directory, less the runs `lost`."""
    every = [run for seed in range(seeds) for run in adacomm_set(seed=seed)]
    kept = [run for run in every if (run.name, run.config["seed"]) not in lost]
    return in_directories(kept, tmp_path / "runs")


def test_a_run_lost_between_a_claims_seeds_is_named_with_the_command_and_seeds_to_make_it(
    tmp_path,
):
    _, results, page, _ = _page(tmp_path, _seeds_without(tmp_path, 5, ("sync", 3)))
    md = to_markdown(page)
    assert {r.claim.id: r.verdict for r in results}["headline_time_to_sync_loss"] == "not run"
    missing = next(line for line in md.splitlines() if line.startswith("Runs missing:"))
    assert missing.startswith("Runs missing: sync seed=3 (read by claims headline_time_to_")
    assert missing.endswith("Make them with `repro reproduce adacomm scale=small seeds=4`.")
    assert md.count("Runs missing:") == 1
    # a label with no run at all is the set's to make at its seeds, adding seeds where needed
    gone = [("adacomm_lrdecay", seed) for seed in range(5)]
    _, _, page, _ = _page(tmp_path / "label", _seeds_without(tmp_path / "label", 5, *gone))
    missing = next(ln for ln in to_markdown(page).splitlines() if ln.startswith("Runs missing:"))
    assert missing.endswith(
        ": adacomm_lrdecay (read by claim headline_lrdecay_time_to_sync_loss)"
        ". Make them with `repro reproduce adacomm scale=small`."
    )


def test_a_run_cut_short_is_not_judged_as_if_whole_and_is_named_with_the_command_to_finish_it(
    tmp_path,
):
    """A run killed (no exit record) or stopped part-way was read into the claims as if whole:
    its last loss, its time to a target. Such a run keeps its curve on the page, but the claims
    reading it are not assessed, and the page says which runs to finish and how."""
    runs = [run for seed in range(3) for run in adacomm_set(seed=seed)]
    for run in runs:
        if (run.name, run.config["seed"]) == ("sync", 1):
            run.exit_code = None
        if (run.name, run.config["seed"]) == ("local_sgd_tau16", 2):
            run.exit_code = STOPPED
    _, results, page, _ = _page(tmp_path, in_directories(runs, tmp_path / "runs"))
    by_id = {r.claim.id: r for r in results}
    headline = by_id["headline_time_to_sync_loss"]
    assert (headline.verdict, headline.ours) == ("not assessed", None)
    assert headline.note == (
        "runs it reads have not finished: sync seed=1 (no exit record: killed, or still running)"
    )
    md = to_markdown(page)
    assert (
        "not assessed: runs it reads have not finished (sync seed=1 (no exit record: killed, or "
        "still running))" in md
    )
    line = next(ln for ln in md.splitlines() if ln.startswith("Runs not finished:"))
    assert line == (
        "Runs not finished: sync seed=1 (no exit record: killed, or still running), "
        "local_sgd_tau16 seed=2 (stopped before its end). A run cut short is not a measurement: "
        "the claims that read them are not assessed. `repro reproduce adacomm scale=small` "
        "finishes them, each from its last checkpoint."
    )
    assert by_id["tau_decreases"].verdict == "reproduced"  # reads neither run: judged
    assert "Runs missing" not in md


def test_a_claim_judged_short_of_a_seed_its_runs_have_says_which_seed_and_run(tmp_path):
    """A run lost at a claim's last seed drops that seed (as seeds added to other claims'
    runs are dropped): the claim's value says so instead of averaging the seed away unseen."""
    _, results, page, _ = _page(tmp_path, _seeds_without(tmp_path, 3, ("sync", 2)))
    headline = next(r for r in results if r.claim.id == "headline_time_to_sync_loss")
    assert headline.seeds == 2
    assert headline.note.startswith("seed 2 not read: no sync run there; mean of 2 seeds; ")
    assert "Runs missing" not in to_markdown(page)
    # seeds that lack the same runs are said together
    two = _seeds_without(tmp_path / "two", 4, ("sync", 2), ("sync", 3))
    _, results, _, _ = _page(tmp_path / "two", two)
    headline = next(r for r in results if r.claim.id == "headline_time_to_sync_loss")
    assert headline.note.startswith("seeds 2, 3 not read: no sync run there; mean of 2 seeds; ")


def test_a_missing_run_is_named_with_the_pattern_claims_and_the_front_that_read_it():
    """With the Top-k set's moo run gone, the claim that reads it by a pattern (no run left
    to match) and the Pareto figure that marks its ratios name it too."""
    claims = load_claims("topk", CLAIMS_DIR)
    runs = {"dense_ring": {0: make_run("dense_ring")}}
    results = evaluate(claims.claims, runs, "small")
    readers = needed_missing(claims, runs, results, "small")[("moo", None)]
    assert "claim moo_accuracy_near_dense" in readers and "claim moo_ratio_band" in readers
    assert "figure cr_pareto_front" in readers


def test_a_ladder_claim_with_a_rung_missing_is_not_run_and_names_the_rung():
    """The tau ladder's claims (`where: {method.name: local_sgd}`, a pattern) with one rung
    deleted were judged on the rungs left, one reproduced, and no run was named missing."""
    shipped = load_claims("adacomm", CLAIMS_DIR)
    data = yaml.safe_load((CLAIMS_DIR / "adacomm.yaml").read_text())
    for claim in data["claims"]:  # judged at the tiny scale, whose set the runs are
        claim["scales"] = [*claim["scales"], "tiny"]
    claims = ClaimsFile(**data)
    made = set_settings("adacomm_tiny")
    full = seeded(adacomm_set("tiny"))
    assert all(r.verdict != "not run" for r in evaluate(claims.claims, full, "tiny", made=made))
    runs = {label: by_seed for label, by_seed in full.items() if label != "local_sgd_tau16"}
    results = evaluate(claims.claims, runs, "tiny", made=made)
    ladder = [r for r in results if r.note == "no local_sgd_tau16 run, which its run set makes"]
    assert {r.claim.id for r in ladder} >= {"larger_tau_faster_per_step"}
    assert all(r.verdict == "not run" for r in ladder)
    readers = needed_missing(claims, runs, results, "tiny")[("local_sgd_tau16", None)]
    assert "claim larger_tau_faster_per_step" in readers
    # runs beside the set alone (a comparison of one's own): judged on those
    assert evaluate(claims.claims, runs, "small", made=set_settings("adacomm_small")) == (
        evaluate(claims.claims, runs, "small")
    )
    # a claim of another scale judges none of them, so it misses none
    assert "not run" not in {r.verdict for r in evaluate(shipped.claims, runs, "tiny", made=made)}


def test_a_missing_run_made_without_a_tracker_is_named_with_what_to_remove(tmp_path):
    """The run exists but logged no curves (tracking=disabled), and `repro reproduce` skips
    it as finished: the note says which directory to remove, or the page never fills in."""
    untracked = tmp_path / "runs" / "adacomm_small" / "sync-0123456789"
    untracked.mkdir(parents=True)
    (untracked / "config.yaml").write_text("seed: 0\n")
    (untracked / RUN_LOCK).write_text("")
    needs = {("sync", None): ["claim headline_time_to_sync_loss"]}
    # not finished (stopped before it logged): the command resumes it, nothing to remove
    (note,) = missing_notes("adacomm", "small", needs, runs_root=str(tmp_path / "runs"))
    assert "tracking=disabled" not in to_markdown(Page("p", [note]))
    (untracked / "summary.json").write_text("{}")
    (note,) = missing_notes("adacomm", "small", needs, runs_root=str(tmp_path / "runs"))
    assert (
        to_markdown(Page("p", [note]))
        .strip()
        .endswith(
            f"Made with tracking=disabled, {untracked} logged no curves a report reads, and the "
            "command skips them as finished: remove them first."
        )
    )
    # a tracked run of that label, or another label's untracked run, is not named
    needs = {("adacomm", None): ["claim headline_time_to_sync_loss"]}
    (note,) = missing_notes("adacomm", "small", needs, runs_root=str(tmp_path / "runs"))
    assert "tracking=disabled" not in to_markdown(Page("p", [note]))
