"""The index over all papers (`repro report all`), figure colours and published references."""

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from repro.claims.claims_file import load_claims
from repro.claims.figure_specs import FigureSpec
from repro.claims.fixed_terms import TERMS_FILE
from repro.errors import UserError
from repro.report.colours import colour_for, line_style
from repro.report.index import collect_runs
from repro.report.index_page import to_html, to_markdown
from repro.report.plots import AXIS_LABELS, resolve_reference
from repro.report.report_cli import main as report_main
from repro.track.provenance import environment_rows
from tests.unit.report_data import adacomm_set, as_set_runs, make_run, seeded

REPO = Path(__file__).resolve().parents[2]
TOPK_TITLE = load_claims("topk", REPO / "reports" / "claims").title


@pytest.fixture
def claims_dir(tmp_path):
    """The AdaComm claims file and a second paper's (Top-k) that has no runs."""
    d = tmp_path / "claims"
    d.mkdir()
    shutil.copy(REPO / "reports" / "claims" / "adacomm.yaml", d)
    shutil.copy(REPO / "reports" / "claims" / "topk.yaml", d)
    return d


def _claims_tables(md: str) -> dict[str, list[list[str]]]:
    """Rows (cells) of every "Claims at scale S" table of the Markdown index."""
    tables = {}
    for scale, body in re.findall(r"## Claims at scale (\w+)\n\n(.*?)\n\n", md, re.S):
        lines = body.splitlines()[2:]
        tables[scale] = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]
    return tables


def test_index_separates_scales_and_lists_papers_not_run(tmp_path, claims_dir):
    # two seeds of equal runs: every interval is its one value
    # the small runs are the run set's, so their claims are judged; with the set's network
    # the synthetic 1 s sync step is shorter than its modeled communication, so the speedup
    # bound is not measured
    runs = [*as_set_runs(adacomm_set("small")), *adacomm_set("tiny")]
    runs += [*as_set_runs(adacomm_set("small", seed=1)), *adacomm_set("tiny", seed=1)]
    out = tmp_path / "reports"
    index = collect_runs(runs, "runs", out, claims_dir, "repro report all")
    md = to_markdown(index, [["python", "3.x"]])
    # the index opens with one line per paper and scale: outcome claims by verdict, its page
    title = load_claims("adacomm", claims_dir).title
    assert md.split("\n")[2:6] == [
        # the larger scale, the nearer the paper's, first
        "- [adacomm](adacomm/report.html), scale small: 3 outcome claims: 1 partly, 2 "
        f"reproduced; model checks: 2 hold, 1 not measured ({title})",
        "- [adacomm](adacomm/tiny/report.html), scale tiny: 3 outcome claims: 3 not assessed; "
        f"model checks: 3 not assessed ({title})",
        f"- topk: not run; run it with `repro reproduce topk scale=small` ({TOPK_TITLE})",
        "",
    ]
    tables = _claims_tables(md)
    assert list(tables) == ["small", "tiny"]
    # the small page at the paper's own address, whatever other scales have runs
    where = {"small": "adacomm/report.html", "tiny": "adacomm/tiny/report.html"}
    for scale, rows in tables.items():
        assert len(rows) == 3  # the three outcome claims, once per scale, never mixed
        assert all(row[7] == scale for row in rows)
        assert all(row[8] == f"[adacomm]({where[scale]})" for row in rows)
    # claims are stated for small and paper: judged at small, computed but not judged at tiny
    assert all(row[6] == "not assessed" for row in tables["tiny"])
    headline = next(r for r in tables["small"] if r[1] == "headline_time_to_sync_loss")
    # trailing means of 3: sync ends at (100/80 + 100/90 + 100/100)/3 = 1.120; adacomm
    # (80/s) first gets there at step 90, (80/70 + 80/80 + 80/90)/3 = 1.011, i.e. at
    # 90 * 0.25 s = 22.5 s against sync's 100 s: below the band 0.267 to 0.4, partly
    assert headline[4] == "0.225 x sync's time (95% CI [0.225, 0.225])"
    assert headline[5] == "seed 0: 0.225; seed 1: 0.225" and headline[6] == "partly"
    assert "the interval straddles an edge" in md
    # the three model checks in a table of their own, per scale, not counted as claims
    title = r"## Checks of the implementation .*? at scale (\w+)\n\n(.*?)\n\n"
    checks = re.findall(title, md, re.S)
    assert sorted((scale, len(body.splitlines()) - 2) for scale, body in checks) == [
        ("small", 3),
        ("tiny", 3),
    ]
    # the counts name the three outcome claims only
    assert "Claims: 1 partly, 2 reproduced." in md
    assert f"| topk | {TOPK_TITLE} | not run | repro reproduce topk scale=small |" in md
    for scale in ("small", "tiny"):
        report = out / Path(where[scale]).parent
        assert (report / "report.html").is_file()
        cmd = f"repro report adacomm --runs runs --scale {scale} --out {out}"
        assert f"Regenerate: `{cmd}`" in md
        assert f"Regenerate: {cmd}" in (report / "report.md").read_text()
    html = to_html(index, [["python", "3.x"]])
    for src in re.findall(r'<img src="([^"]+)"', html):
        assert (out / src).is_file()
    assert len(re.findall(r"<img ", html)) == 2 * len(load_claims("adacomm", claims_dir).figures)


@pytest.mark.parametrize("scale,where", [("small", "adacomm"), ("tiny", "adacomm/tiny")])
def test_a_report_has_one_address_per_scale_whatever_else_has_runs(
    scale, where, tmp_path, claims_dir
):
    index = collect_runs(adacomm_set(scale), "runs", tmp_path, claims_dir)
    assert [s.where for s in index.sections] == [f"{where}/report.html"]
    assert index.sections[0].command.endswith(f"--scale {scale} --out {tmp_path}")
    assert index.sections[0].seeds == "0" and index.sections[0].runs == 5


def test_a_bad_claims_file_stops_the_index_before_any_page_is_written(tmp_path, claims_dir):
    # adacomm's pages were written before topk's broken file was read
    (claims_dir / "topk.yaml").write_text("paper: topk\nseed_cap: [\n")
    out = tmp_path / "reports"
    with pytest.raises(UserError, match=r"topk\.yaml: not valid YAML"):
        collect_runs(adacomm_set("tiny"), "runs", out, claims_dir)
    assert not out.exists()


def test_a_damaged_record_of_claims_terms_stops_the_index_before_any_page_is_written(
    tmp_path, claims_dir
):
    # adacomm's pages were written before the index met topk's damaged record
    runs = tmp_path / "runs"
    (runs / "topk_tiny").mkdir(parents=True)
    (runs / "topk_tiny" / TERMS_FILE).write_text("{not json")
    out = tmp_path / "reports"
    dense = make_run("dense_ring", group="topk_tiny", scale="tiny")
    found = [*adacomm_set("tiny"), replace(dense, path=runs / "topk_tiny" / "dense_ring")]
    with pytest.raises(UserError, match=rf"^{runs}/topk_tiny/{TERMS_FILE} cannot be read"):
        collect_runs(found, str(runs), out, claims_dir)
    assert not out.exists()


def test_a_group_mixing_scales_is_refused_not_mixed(tmp_path, claims_dir):
    runs = [*adacomm_set("small"), make_run("odd", scale="paper", group="adacomm_small")]
    index = collect_runs(runs, "runs", tmp_path, claims_dir)
    (section,) = index.sections
    assert section.results == [] and "mixes scales paper, small" in section.refused
    md = to_markdown(index, [])
    assert "refused: run group adacomm_small under runs mixes scales paper, small" in md
    assert not (tmp_path / "adacomm" / "report.html").exists()


@pytest.mark.parametrize("runs", [None, "empty"], ids=["no runs root yet", "an empty root"])
def test_report_all_without_runs_lists_every_paper_as_not_run(
    runs, tmp_path, claims_dir, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the default root, runs, is not there
    out = tmp_path / "reports"
    args = ["all", "--out", str(out), "--claims", str(claims_dir)]
    if runs:
        (tmp_path / runs).mkdir()
        args += ["--runs", runs]
    assert report_main(args) == 0
    md = (out / "index.md").read_text()
    # a root named on purpose is where the command given puts the runs
    how = "repro reproduce adacomm scale=small" + (f" runs_root={runs}" if runs else "")
    assert f"| adacomm | {load_claims('adacomm', claims_dir).title} | not run | {how} |" in md
    assert "Claims at scale" not in md
    assert f"adacomm: not run; run it with `{how}`" in capsys.readouterr().out


def test_environment_names_versions_hardware_and_commit():
    import platform

    import torch

    rows = dict(map(tuple, environment_rows(REPO)))
    assert rows["python"] == platform.python_version()
    assert rows["torch"] == torch.__version__.split("+")[0] or rows["torch"] == torch.__version__
    assert rows["CPU"].startswith(f"{__import__('os').cpu_count()} logical cores")
    assert re.fullmatch(r"[0-9a-f]{40}( \(uncommitted changes\))?", rows["git commit"])


def test_colours_follow_the_method_across_papers():
    # baselines black; a family is shaded by its parameter, darker for larger |log2|
    assert colour_for("dense_ring") == colour_for("sync") == "#000000"
    blues = [colour_for(f"local_sgd_tau{t}") for t in (2, 4, 16, 32)]
    lightness = [sum(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in blues]
    assert lightness == sorted(lightness, reverse=True) and len(set(blues)) == 4
    ratios = [colour_for(f"star_topk_c{c}") for c in ("0.1", "0.01", "0.001")]
    assert len(set(ratios)) == 3
    batches = [colour_for(f"adasum_sgd_b{b}") for b in (64, 256, 1024, 4096, 16384)]
    assert len(set(batches)) == 5
    # the combiner names the colour, the optimizer the line style
    assert colour_for("adasum_sgd_b1024") == colour_for("adasum_lamb_b1024")
    assert line_style("adasum_lamb_b1024") == "-." and line_style("adasum_sgd_b1024") == "-"
    assert colour_for("adasum_sgd_b1024") != colour_for("mean_sgd_b1024")
    assert line_style("local_sgd_tau4") == "--" and line_style("adacomm") == "-"


def test_every_clock_and_logged_metric_axis_has_a_unit():
    for metric in ("time/modeled_s", "time/wall_s", "comm/measured_s"):
        assert re.search(r"[(, ]s\)$", AXIS_LABELS[metric]), metric  # seconds
    for metric in ("step", "epoch", "train/loss", "test/acc", "comm/bytes", "samples"):
        assert "(" in AXIS_LABELS[metric], metric


def test_a_published_value_relative_to_a_run_becomes_a_line():
    # sync's last point at seed 0: step 100 at 1 s/step; at seed 1 (2 s/step): 200 s
    runs = seeded([*adacomm_set(), make_run("sync", sec_per_step=2.0, seed=1)])
    spec = FigureSpec(
        id="f",
        title="t",
        x="modeled",
        y="train/loss",
        reference=[
            {"run": "sync", "x_times": 0.333, "label": "published: a third of sync's time"},
            {"y": 0.5},
            {"run": "missing", "y_times": 1.0},
        ],
    )
    resolved = [resolve_reference(ref, spec, runs) for ref in spec.reference]
    # the mean of the seeds' last points, 150 s
    assert resolved[0] == {"x": pytest.approx(49.95), "label": "published: a third of sync's time"}
    assert resolved[1] == {"y": 0.5} and resolved[2] is None
    with pytest.raises(Exception, match="x_times and/or y_times"):
        FigureSpec(id="g", title="t", y="train/loss", reference=[{"x_times": 0.3}])
