"""The wandb Report of a reproduction, built without a server and not saved."""

from pathlib import Path

import wandb_workspaces.reports.v2 as wr

from repro.report.build import ordered, select_runs
from repro.report.claims import load_claims
from repro.report.colours import colour_for
from repro.report.plots import axis_label
from repro.report.seeds import evaluate
from repro.report.wandb_report import TITLE_MAX, build_wandb_report, publish
from tests.unit.report_data import adacomm_set

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"


def _report():
    claims = load_claims("adacomm", CLAIMS_DIR)
    scale, runs, _ = select_runs(adacomm_set(), "adacomm", None, "runs")
    runs = ordered(claims, runs)
    results = evaluate(claims.claims, runs, scale)
    report = build_wandb_report(claims, runs, results, scale, entity="me", project="repro")
    return claims, runs, results, report


def test_report_has_the_claims_table_and_setup_as_markdown():
    claims, _, results, report = _report()
    assert (report.entity, report.project) == ("me", "repro")
    assert report.title.startswith("Reproduction: Adaptive Communication Strategies")
    assert len(report.title) <= TITLE_MAX
    markdown = [b.text for b in report.blocks if isinstance(b, wr.MarkdownBlock)]
    setup, table, checks = markdown
    assert "| workers | 4 |" in setup and "| scale | small |" in setup
    assert "## Checks of the implementation" in checks
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    rows += [ln for ln in checks.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(rows) == len(claims.claims) == len(results)
    # outcome claims first, then the model checks
    ordered = sorted(results, key=lambda r: r.claim.kind != "outcome")
    for row, result in zip(rows, ordered, strict=True):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[0] == result.claim.id and cells[7] == result.verdict_text()
    assert any(r.verdict == "reproduced" for r in results)


def test_panels_plot_every_curve_against_modeled_time_and_steps():
    claims, runs, _, report = _report()
    (grid,) = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    (runset,) = grid.runsets
    assert runset.filters == "Group = 'adacomm_small'" and runset.name == "adacomm_small"
    assert runset.custom_run_colors == {r[0].run_id: colour_for(label) for label, r in runs.items()}
    pairs = {(p.x, p.y[0]) for p in grid.panels}
    curves = [f for f in claims.figures if f.kind in ("curves", "steps")]
    for metric in {f.y for f in curves}:
        assert {("time/modeled_s", metric), ("step", metric)} <= pairs
    # the claims file's own figures come first, with its titles and log scales
    for fig, panel in zip(curves, grid.panels, strict=False):
        assert panel.title == fig.title and bool(panel.log_y) == fig.logy
    config = grid.panels[0]._to_model().config
    assert config.x_axis == "time/modeled_s" and config.metrics == ["train/loss"]
    assert config.x_axis_title == axis_label("time/modeled_s") and config.y_log_scale is True
    assert len(grid.panels) == len(pairs)  # no panel twice


def test_publish_without_a_key_says_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc with a stored key
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    url, missing = publish("adacomm", tmp_path / "runs", None, CLAIMS_DIR)
    assert url is None
    assert missing == "no wandb API key (set WANDB_API_KEY or run `wandb login`)"
