"""A paper's report page: the summary first, the setup per arm, links to runs, missing runs.

Synthetic AdaComm runs (tests/unit/report_data.py) at two equal seeds, so every interval
is its one value and the numbers can be worked out by hand."""

import re
from pathlib import Path

from repro.claims.claims_file import Claim, load_claims
from repro.claims.result import ClaimResult
from repro.claims.verdicts import evaluate
from repro.pages.writer import FigureOut, Table, fmt, md_cell, to_html, to_markdown
from repro.report.build import ordered, select_runs
from repro.report.missing_runs import missing_notes
from repro.report.page import CHECKS_TITLE, WANDB_URL, assemble, metrics_table
from repro.report.summary import SUMMARY_HEADERS, plain_verdict
from repro.spec_loader import build
from tests.unit.report_data import adacomm_set, claim_dict, in_directories, make_run

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


def test_a_link_to_a_folder_with_spaces_or_brackets_is_one_markdown_destination():
    """CommonMark ends a bare destination at a space: `[run](../my runs/x)` showed as text.
    Within <...> (CommonMark's form for such targets) it is one link; a table's `|` and the
    brackets themselves escaped."""
    from repro.pages.writer import Link

    assert md_cell(Link("run", "../runs/x-1")) == "[run](../runs/x-1)"
    assert md_cell(Link("run", "../my runs/x (1)")) == "[run](<../my runs/x (1)>)"
    assert md_cell(Link("run", "a|b<c>")) == "[run](<a\\|b\\<c\\>>)"
