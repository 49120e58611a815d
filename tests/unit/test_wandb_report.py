"""The W&B Report of a reproduction: its spec, the Report built from it, and `--publish` with
no key or no server (wandb offline for real: the runs are written by the tracker)."""

import json
from pathlib import Path

import wandb_workspaces.reports.v2 as wr
import yaml

from repro.claims.claims_file import load_claims
from repro.claims.figure_specs import FigureSpec
from repro.claims.verdicts import evaluate, model_checks, outcomes
from repro.cli import main as cli_main
from repro.report.build import ordered, select_runs
from repro.report.colours import colour_for
from repro.report.plots import axis_label
from repro.report.report_cli import main as report_main
from repro.report.summary import plain_verdict
from repro.report.wandb_spec import TITLE_MAX, build_spec, figure_grids
from repro.track.runs import find_runs
from repro.track.wandb_publish import SPEC_FILE
from repro.track.wandb_report import BAND, to_report
from tests.unit.report_data import (
    STEPS,
    adacomm_set,
    as_set_runs,
    make_run,
    seeded,
    write_offline_runs,
)

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"
NO_KEY = "no wandb API key (set WANDB_API_KEY or run `wandb login`)"


def _parts(run_list, claims_dir=CLAIMS_DIR):
    claims = load_claims("adacomm", claims_dir)
    scale, runs, _, _ = select_runs(run_list, "adacomm", None, "runs")
    runs = ordered(claims, runs)
    return claims, runs, scale, evaluate(claims.claims, runs, scale)


def _rows(markdown: str) -> list[list[str]]:
    lines = [ln for ln in markdown.splitlines() if ln.startswith("| ") and "---" not in ln]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[1:]]


def test_a_one_seed_spec_counts_one_seed():
    claims, runs, scale, results = _parts(adacomm_set())
    lead = build_spec(claims, runs, results, scale, project="repro", entity=None)["blocks"][0]
    assert "; 1 seed (0). Claims:" in lead["text"]


def test_spec_opens_with_the_summary_then_findings_curves_choices_tuning_setup_checks():
    claims, runs, scale, results = _parts(adacomm_set() + adacomm_set(seed=1))
    spec = build_spec(claims, runs, results, scale, project="repro", entity=None)
    assert json.loads(json.dumps(spec)) == spec  # plain JSON, nothing Python-only
    assert spec["title"].startswith("Reproduction: Adaptive Communication Strategies")
    assert len(spec["title"]) <= TITLE_MAX and spec["entity"] is None
    kinds = [b["kind"] for b in spec["blocks"]]
    texts = [b.get("text", "") for b in spec["blocks"]]
    headings = [t.splitlines()[0] for t in texts if t.startswith("## ")]
    assert headings[:2] == ["## Summary", "## Why claims did not reproduce"]
    assert headings[2:] == [
        "## Choices and deviations",
        "## Setup",
        "## Checks of the implementation against the paper's formulas (not counted as claims)",
    ]
    assert kinds.index("markdown") == 1  # the summary right after the lead line
    assert "2 seeds (0, 1)" in texts[0] and "run group adacomm_small" in texts[0]
    # one summary row per claim, outcome claims first, the paper's number, ours, the verdict
    summary = _rows(texts[1])
    expected = [*outcomes(results), *model_checks(results)]
    assert len(summary) == len(expected) == len(claims.claims)
    for row, r in zip(summary, expected, strict=True):
        assert row[0].endswith(f"{r.claim.statement} {r.claim.id}")
        assert row[0].startswith("Model check: ") == (r.claim.kind == "model_check")
        assert row[2] == r.ours_text(r.claim.unit) and row[3] == plain_verdict(r)
        assert "95% CI" in row[2] or r.interval is None
    choices = _rows(next(t for t in texts if t.startswith("## Choices")))
    assert [row[0] for row in choices] == [c.setting for c in claims.choices]
    assert "Learning rates: set by hand per run (experiment.tuned is false)." in texts
    assert kinds.count("panels") >= sum(f.kind in ("curves", "steps") for f in claims.figures)


def test_figure_grids_group_by_label_select_runs_and_state_reference_lines():
    runs = seeded(
        [make_run(label, seed=s) for label in ("sync", "adacomm", "slow") for s in (0, 1)]
    )
    figures = [
        FigureSpec(
            id="all",
            title="All",
            y="train/loss",
            x="modeled",
            logy=True,
            reference=[
                {"y": 0.5, "label": "target"},
                {"run": "sync", "x_times": 0.25, "label": "a quarter of sync's time"},
            ],
        ),
        FigureSpec(
            id="two",
            title="Two",
            y="test/acc",
            x="modeled",
            runs=["sync", "adacomm"],
            headline=True,
        ),
    ]
    grids = figure_grids(figures, runs, "adacomm_small")
    head, every, clocks = grids
    assert head["title"] == "Two"  # the headline first, over its own runs only
    chosen = [r.run_id for lab in ("sync", "adacomm") for r in runs[lab].values()]
    assert sorted(head["run_ids"]) == sorted(chosen)
    assert head["colours"] == {"sync": colour_for("sync"), "adacomm": colour_for("adacomm")}
    every_id = [r.run_id for by_seed in runs.values() for r in by_seed.values()]
    assert sorted(every["run_ids"]) == sorted(every_id) and every["lines"][0]["log_y"] is True
    # sync's last point is at step 100, one modeled second per step
    quarter = 0.25 * STEPS[-1]
    assert every["references"] == [
        f"target: at {axis_label('train/loss')} = 0.5",
        f"a quarter of sync's time: at {axis_label('time/modeled_s')} = {quarter:g}",
    ]
    assert {(ln["x"], ln["y"]) for ln in clocks["lines"]} == {
        ("step", "train/loss"),
        ("step", "test/acc"),
    }

    spec = {"project": "repro", "title": "t", "description": "d", "blocks": grids}
    report = to_report(spec, "me")
    panel_grids = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    titles = [b.text for b in report.blocks if isinstance(b, wr.H3)]
    assert titles == ["Two", "All", clocks["title"]]
    (runset,) = panel_grids[0].runsets
    assert runset.filters.startswith("Group = 'adacomm_small' and ID in [")
    assert runset.groupby == ["config.experiment.label"]
    plot, note = panel_grids[1].panels
    config = plot._to_model().config
    assert (config.x_axis, config.metrics) == ("time/modeled_s", ["train/loss"])
    assert (config.group_agg, config.group_area, config.aggregate) == ("mean", BAND, True)
    assert config.group_by == "experiment.value.label" and config.y_log_scale is True
    assert "a quarter of sync's time" in note.markdown
    colours = {k.keys[0].value: v for k, v in panel_grids[1].custom_run_colors.items()}
    assert colours == {label: colour_for(label) for label in runs}


def test_publish_offline_saves_the_spec_and_says_how_to_publish_it(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc with a stored key
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    runs_root, out, claims_dir = tmp_path / "runs", tmp_path / "reports", tmp_path / "claims"
    write_offline_runs(runs_root, as_set_runs(adacomm_set()[:4]))
    # the claims without their figures: drawing them is the local report's test, not this one's
    raw = yaml.safe_load((CLAIMS_DIR / "adacomm.yaml").read_text())
    claims_dir.mkdir()
    (claims_dir / "adacomm.yaml").write_text(yaml.safe_dump({**raw, "figures": []}))
    argv = ["adacomm", "--runs", str(runs_root), "--out", str(out), "--claims", str(claims_dir)]
    assert report_main([*argv, "--publish"]) == 0  # the local report stands
    spec_path = out / "adacomm" / SPEC_FILE
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == (
        f"wandb report not published ({NO_KEY}): saved its spec to {spec_path}; "
        f"publish it later with `repro report publish {spec_path}`"
    )
    assert (out / "adacomm" / "report.html").is_file()
    saved = spec_path.read_bytes()
    claims, runs, scale, results = _parts(find_runs(runs_root), claims_dir)
    assert json.loads(saved) == build_spec(
        claims, runs, results, scale, project="repro", entity=None
    )

    # publishing later without a key: one line, exit 2, the spec kept as it was
    for path in (spec_path, spec_path.parent):
        assert cli_main(["report", "publish", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"error: wandb report in {spec_path} not published: {NO_KEY}; the spec stays "
            "there for the next try"
        ]
    # a key but no server (a closed local port)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    assert cli_main(["report", "publish", str(spec_path)]) == 2
    assert "wandb server http://127.0.0.1:9 is not reachable" in capsys.readouterr().err
    assert spec_path.read_bytes() == saved

    (tmp_path / "other.json").write_text("{}")
    bad_specs = {"other.json": "is not a Report spec of this version", "none.json": "no Report"}
    for name, says in bad_specs.items():
        bad = tmp_path / name
        assert cli_main(["report", "publish", str(bad)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert says in line
