"""A paper's report page: the summary first, the setup per arm, links to runs, missing runs.

Synthetic AdaComm runs (tests/unit/report_data.py) at two equal seeds, so every interval
is its one value and the numbers can be worked out by hand."""

import re
from pathlib import Path

import yaml

from repro.claims.claims_file import Claim, ClaimsFile, load_claims
from repro.claims.result import ClaimResult
from repro.claims.set_regime import set_settings
from repro.claims.verdicts import evaluate
from repro.locks import RUN_LOCK
from repro.pages.writer import FigureOut, Page, Table, fmt, md_cell, to_html, to_markdown
from repro.report.build import ordered, select_runs
from repro.report.missing_runs import missing_notes, needed_missing
from repro.report.page import CHECKS_TITLE, WANDB_URL, assemble, metrics_table
from repro.report.summary import SUMMARY_HEADERS, plain_verdict
from repro.spec_loader import build
from repro.track.runs import STOPPED
from tests.unit.report_data import adacomm_set, claim_dict, in_directories, make_run, seeded

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"
URL = "https://wandb.ai/me/repro/runs/id-sync"


def _runs(tmp_path: Path, drop: tuple[str, ...] = ()):
    """Two equal seeds of the AdaComm set, each run in a directory of its own under
    tmp_path/runs; seed 0 of sync has a wandb page."""
    runs = in_directories([*adacomm_set(), *adacomm_set(seed=1)], tmp_path / "runs", drop)
    for run in runs:
        if (run.name, run.config["seed"]) == ("sync", 0):
            run.summary[WANDB_URL] = URL
    return runs


def _page(tmp_path: Path, runs, figures=()):
    claims = load_claims("adacomm", CLAIMS_DIR)
    scale, chosen, _, _ = select_runs(runs, "adacomm", None, "runs")
    chosen = ordered(claims, chosen)
    results = evaluate(claims.claims, chosen, scale)
    page_dir = tmp_path / "reports" / "adacomm"
    page = assemble(claims, chosen, scale, results, list(figures), ["Regenerate: x"], page_dir)
    return claims, results, page, page_dir


def _md_rows(md: str, title: str) -> list[list[str]]:
    part = md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in part.splitlines() if ln.startswith("| ") and "---|" not in ln]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in lines]


def test_the_page_opens_with_the_summary_then_the_rule_and_the_headline_figure(tmp_path):
    headline = FigureOut("loss_vs_modeled_time", "Loss", "Look at the crossing.", "h.png", "", True)
    other = FigureOut("loss_vs_step", "Loss per step", "Per step.", "o.png")
    claims, results, page, _ = _page(tmp_path, _runs(tmp_path), [other, headline])
    md, html = to_markdown(page), to_html(page)

    first = next(b for b in page.blocks if isinstance(b, Table))
    assert first.title == "Summary" and first.headers == SUMMARY_HEADERS
    # the first table of both files is the summary, before anything but the lead lines
    assert md.index("## Summary") < md.index("| ") < md.index("## Setup")
    assert html.index("<table") == html.index('<table class="summary">')
    rows = _md_rows(md, "Summary")
    assert rows[0] == SUMMARY_HEADERS
    outcome = [c for c in claims.claims if c.kind == "outcome"]
    checks = [c for c in claims.claims if c.kind == "model_check"]
    # outcome claims first, then the model checks, each with its statement and id
    assert [r[0] for r in rows[1:]] == [f"{c.statement} {c.id}" for c in outcome] + [
        f"Model check: {c.statement} {c.id}" for c in checks
    ]
    by_id = {r.claim.id: r for r in results}
    # a model check holds or does not; every one holds on these runs
    assert {by_id[c.id].verdict for c in checks} == {"reproduced"}
    assert [r[3] for r in rows[1 + len(outcome) :]] == ["holds"] * len(checks)
    # in the summary and in the checks' own table below it
    assert html.count('<td class="v-holds">holds</td>') == 2 * len(checks)
    assert "| reproduced |" not in md.split(CHECKS_TITLE)[1].split("\n## ")[0]
    # sync ends at loss 1.120 (trailing mean of 3) at 100 s; adacomm first gets there at step
    # 90 at 0.25 s per step: 22.5 s, 0.225 of sync's time at both seeds, so the interval is
    # [0.225, 0.225]: below the band 0.267-0.4, inside the partly rule (at most 0.9)
    headline_row = rows[1]
    assert headline_row[1:] == [
        "0.333 x sync's time",
        "0.225 x sync's time (95% CI [0.225, 0.225])",
        "partly reproduced",
    ]
    assert by_id["headline_time_to_sync_loss"].verdict == "partly"
    # the summary's verdict cell is coloured by its verdict and links to the detailed row
    assert '<td class="v-partly">partly reproduced</td>' in html
    assert 'href="#claim-headline_time_to_sync_loss"' in html
    assert 'id="claim-headline_time_to_sync_loss"' in html

    # then the verdict rule, then the headline figure (once), then the setup
    rule = html.index("How verdicts are given:")
    assert html.index("</table>") < rule < html.index('src="h.png"') < html.index(">Setup</h2>")
    assert html.count('src="h.png"') == 1 and html.index(">Figures</h2>") < html.index("o.png")
    assert md.index("![Loss](h.png)") < md.index("## Setup") < md.index("![Loss per step]")


def test_setup_names_each_arms_rate_and_the_stopping_rule_with_the_steps_reached(tmp_path):
    budget = {"trainer": {"steps": 20000, "time_budget_s": 90.0}}
    runs = [
        make_run("sync", config={**budget, "optim": {"name": "sgd", "lr": 0.1}}),
        make_run("local_sgd_tau4", steps=[10, 20, 30, 40], config=budget),
        make_run(
            "adacomm",
            steps=[10, 20, 30, 40, 50, 60],
            config={**budget, "optim": {"name": "sgd", "lr": 0.05, "milestones": [20]}},
        ),
    ]
    _, _, page, _ = _page(tmp_path, runs)
    setup = dict(_md_rows(to_markdown(page), "Setup")[1:])
    assert setup["learning rate"] == "0.1: sync, local_sgd_tau4; 0.05, x0.1 at epoch 20: adacomm"
    assert (
        setup["stopping rule"] == "90 s modeled budget (at most 20,000 steps); 40-100 steps reached"
    )
    assert setup["workers"] == "4" and setup["seeds"] == "1 (0)"

    target = {"trainer": {"steps": 500, "target_acc": 0.9}}
    runs = [
        make_run("sync", steps=[10, 20, 30], config=target),
        make_run("adacomm", steps=[10, 20, 30, 40, 50], config=target),
        make_run("local_sgd_tau4", config={"trainer": {"steps": 300}}),
    ]
    _, _, page, _ = _page(tmp_path, runs)
    setup = dict(_md_rows(to_markdown(page), "Setup")[1:])
    assert setup["stopping rule"] == (
        "test accuracy 0.9 reached (at most 500 steps) for sync, adacomm: 30-50 steps reached; "
        "300 steps for local_sgd_tau4: 100 steps reached"
    )


def _links(cell: str) -> list[tuple[str, str]]:
    return re.findall(r"\[([^\]]+)\]\(([^)]+)\)", cell)


def test_run_ids_and_the_runs_a_claim_read_link_to_their_directories(tmp_path):
    runs = _runs(tmp_path)
    claims, _, page, page_dir = _page(tmp_path, runs)
    md = to_markdown(page)
    by_id = {r.run_id: r for r in runs}
    metrics = _md_rows(md, "Final metrics per run and seed (last logged point)")
    assert len(metrics) - 1 == len(runs)
    for row in metrics[1:]:
        (run_id, href), *wandb = _links(row[-1])
        assert (page_dir / href).resolve() == by_id[run_id].path.resolve()
        assert href.startswith("../../runs/adacomm_small/") and href.endswith("/")
        assert wandb == ([("wandb", URL)] if run_id == "id-sync" else [])

    # a claim's row links every run it read: the run and reference its params name, at
    # both seeds
    claim = next(c for c in claims.claims if c.id == "headline_time_to_sync_loss")
    params = claim.metric["params"]
    row = next(r for r in _md_rows(md, "Claims") if r[0] == claim.id)
    assert row[-1].startswith(f"{params['reference']}: seeds ")
    read = {(page_dir / href).resolve() for _, href in _links(row[-1])}
    named = {params["run"], params["reference"]}
    assert read == {r.path.resolve() for r in runs if r.name in named}
    assert len(read) == 4


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


def test_runs_another_scale_makes_are_said_apart_in_small_print(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "x_small.yaml").write_text(
        "experiment:\n  runs:\n    a: [method=sync]\n    c: [method=sync]\n"
    )
    needs = {
        ("a", None): ["claim one"],
        ("b", None): ["claim two", "figure f"],
        ("d", None): ["claim two", "table t"],
    }
    mine, other = missing_notes("x", "small", needs, tmp_path)
    assert (mine.css, other.css) == ("missing", "rule")
    assert md_cell(mine.text) == (
        "Runs missing: a (read by claim one). Make them with `repro reproduce x scale=small`."
    )
    assert md_cell(other.text) == (
        "Not in the x_small run set, so never made at this scale: b, d (read by claim two; "
        "figure f; table t)."
    )
    assert missing_notes("x", "small", {}, tmp_path) == []
    # a claim stated for another scale says so in the summary, beside the missing run; not
    # that this scale's set never makes the run: it may make it, and lost it
    claim = build(Claim, claim_dict(scales=["paper"]), "claim")
    result = ClaimResult(claim, None, "not run", "no run labelled 'adacomm'")
    assert plain_verdict(result, "small") == (
        "not run: a run it reads is missing; stated for scale paper, not judged here"
    )
    assert plain_verdict(result, "paper") == "not run: a run it reads is missing"


def test_the_run_table_reads_each_metrics_last_logged_value_past_rows_without_it():
    """A run's last rows may lack a metric (a row of other metrics) or log it as NaN: the run
    table's final column is the last value actually logged, and a dash where none ever was."""
    run = make_run(
        "sync", extra=lambda s: {"test/acc": float("nan")} if s == 100 else {}, steps=[10, 20, 100]
    )
    run.history.append({"step": 110, "train/loss": 0.5})
    for row in run.history:
        row.pop("comm/bytes", None)
    table = metrics_table({"sync": {0: run}}, name=str)
    row = dict(zip(table.headers, table.rows[0], strict=True))
    assert row["steps"] == fmt(110)
    assert row["final train loss"] == fmt(0.5)
    assert row["test acc"] == fmt(0.2)  # step 100's NaN and step 110's absence skipped
    assert row["wall time (s)"] == fmt(200.0)
    assert row["payload sent (MB)"] == fmt(None)


def _with_environment(run, software="torch 1", machine="cpu A", data=None):
    run.config["environment"] = {
        "software": software,
        "machine": machine,
        "data": data or f"sha256 seed{run.config['seed']}",
    }
    return run


def test_the_setup_says_what_the_runs_were_made_with_and_a_note_names_what_differs(tmp_path):
    # every arm read the data of its seed (one digest per seed), on one install
    runs = [_with_environment(r) for r in [*adacomm_set(), *adacomm_set(seed=1)]]
    _, _, page, _ = _page(tmp_path, runs)
    md = to_markdown(page)
    setup = dict(_md_rows(md, "Setup")[1:])
    assert setup["software (when run)"] == "torch 1" and setup["machine (when run)"] == "cpu A"
    assert setup["data read (digest)"] == (
        "the same at each seed in every arm that recorded it (2 data sets; each run's digest is "
        "in the table of runs)"
    )
    rows = _md_rows(md, "Final metrics per run and seed (last logged point)")
    header, body = rows[0], rows[1:]
    digests = {(r[1], r[2]): r[header.index("data read (digest)")] for r in body}
    assert digests[("sync", "1")] == "sha256 seed1" and digests[("adacomm", "0")] == "sha256 seed0"
    assert "were made with different" not in md and "same data at a seed" not in md

    # one arm resumed on another machine: the machine row names it, a note says so
    runs[0].config["environment"]["machine"] = "cpu A; then cpu B"
    md = to_markdown(_page(tmp_path, runs)[2])
    setup = dict(_md_rows(md, "Setup")[1:])
    assert setup["machine (when run)"] == (
        "cpu A; then cpu B: sync; cpu A: sync, local_sgd_tau4, local_sgd_tau16, adacomm, "
        "adacomm_lrdecay"
    )
    assert "The runs were made with different machine (Setup)" in md

    # an arm that read other data at a seed: named in the row and in the note above all
    runs[1].config["environment"]["data"] = "sha256 other"
    md = to_markdown(_page(tmp_path, runs)[2])
    setup = dict(_md_rows(md, "Setup")[1:])
    label = runs[1].config["experiment"]["label"]
    assert setup["data read (digest)"] == (
        f"differs between arms: mnist1d seed 0: sha256 seed0 (sync, "
        f"{', '.join(r.name for r in runs[2:5])}), sha256 other ({label})"
    )
    assert "The arms did not all read the same data at a seed" in md
    assert md.index("same data at a seed") < md.index("## Setup")


def test_runs_that_recorded_no_environment_say_so_and_raise_no_note(tmp_path):
    runs = [*adacomm_set(), *adacomm_set(seed=1)]
    _with_environment(runs[0])  # one new run beside older ones
    md = to_markdown(_page(tmp_path, runs)[2])
    setup = dict(_md_rows(md, "Setup")[1:])
    assert setup["software (when run)"].startswith("torch 1: sync; not recorded: sync, ")
    assert setup["data read (digest)"] == (
        "the same at each seed in every arm that recorded it (1 data set; each run's digest is "
        "in the table of runs); not recorded: sync, local_sgd_tau4, local_sgd_tau16, adacomm, "
        "adacomm_lrdecay"
    )
    assert "made with different" not in md and "same data at a seed" not in md


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
