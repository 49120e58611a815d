"""The Flexible Top-k run set at test size: reproduce -> runs read back -> report with the
Table-IV-like table and every figure; a repeat skips every finished run. The tiny set runs
the small set's labels with the same settings, so it smoke-tests the reproduction's regime."""

import csv
import re

import pytest
import yaml

from repro.cluster.launcher import longest_first
from repro.config import CONFIG_DIR
from repro.report.page import CHECKS_TITLE
from repro.reproduce.run_sets import run_set
from tests.helpers import REPO, repro_cli, reproduce_tiny_args


def _experiment(name: str) -> dict:
    return yaml.safe_load((CONFIG_DIR / "experiment" / f"{name}.yaml").read_text())


TINY = _experiment("topk_tiny")
LABELS = list(TINY["experiment"]["runs"])
CLAIMS = yaml.safe_load((REPO / "reports" / "claims" / "topk.yaml").read_text())
FIGURES = [figure["id"] for figure in CLAIMS["figures"]]


def _table(md: str, title: str) -> list[dict[str, str]]:
    """The body rows of the Markdown table under `## title`, as {header: cell}."""
    part = md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in part.splitlines() if ln.startswith("| ") and "---" not in ln]
    cells = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[1:]]


HORIZON = (
    "trainer.steps=",
    "optim.milestones=",
    "trainer.eval_every=",
    "trainer.divergence.",  # the chance rule follows the horizon
    "trainer.checkpoint_every=",
)


def _settings(overrides: list[str]) -> list[str]:
    """A run's overrides less its horizon, which each scale sets for itself."""
    return [o for o in overrides if not o.startswith(HORIZON)]


def test_tiny_and_paper_sets_run_the_small_sets_labels_and_settings():
    small, paper = _experiment("topk_small"), _experiment("topk_paper")
    runs = small["experiment"]["runs"]
    assert list(paper["experiment"]["runs"]) == list(TINY["experiment"]["runs"]) == list(runs)
    # the tiny set adds only what its shortness needs: its compressed C1 schedule dropped at
    # Table IV's fixed link, and shorter MOO probes and gain window
    extras = ("network.schedule=[]", "method.probe_steps=2", "method.gain_window=16")
    for label, overrides in TINY["experiment"]["runs"].items():
        assert paper["experiment"]["runs"][label] == _settings(runs[label]), label
        assert [o for o in _settings(overrides) if o not in extras] == _settings(runs[label])
        fixed_link = "network=table4_4ms_20g" in overrides
        assert ("network.schedule=[]" in overrides) == fixed_link, label
    sizes = [e["trainer"]["world_size"] for e in (TINY, small, paper)]
    assert sizes == [8, 8, 8]  # the paper's worker count


@pytest.mark.parametrize("scale", ["small", "paper"])
def test_rows_read_at_c0001_send_each_parameter_as_often_as_the_paper(scale):
    """c x steps >= the paper's 0.001 x 9,766 for every run a c = 0.001 accuracy claim reads,
    with the lr decays at the same fractions of the run as the small set's 1,300 steps."""
    read = {label for label in LABELS if re.fullmatch(r"(ag|star|var)_topk_c0\.001", label)}
    assert len(read) == 3
    for label, cfg in run_set("topk", scale, [], seeds=1):
        sends = cfg.method.cr * cfg.trainer.steps
        if label in read:
            assert sends >= 0.001 * 9766, label
            epochs = cfg.trainer.steps * 8 * 32 / (8000 if scale == "small" else 50_000)
            fractions = [round(m / epochs, 3) for m in cfg.optim.milestones]
            assert fractions == ([0.361, 0.721] if scale == "small" else [0.3, 0.6, 0.9])
        elif cfg.method.cr_controller == "fixed" and not label.startswith("flex"):
            assert sends >= 0.001 * 9766 or cfg.method.cr == 1, label


def test_side_by_side_the_long_rows_start_first():
    """The three 10,400-step rows before the 1,300-step ones (started last, one would run
    alone for minutes on a core while the other idles); equal runs keep the set's order."""
    runs = run_set("topk", "small", [], seeds=1)
    order = [label for label, _ in longest_first(runs)]
    long_rows = ["ag_topk_c0.001", "star_topk_c0.001", "var_topk_c0.001"]
    assert order == long_rows + [label for label, _ in runs if label not in long_rows]


@pytest.mark.slow
def test_tiny_run_set_produces_table_iv_and_every_figure_and_repeat_skips(tmp_path):
    args = reproduce_tiny_args("topk", tmp_path)
    first = repro_cli(*args, cwd=tmp_path, timeout=1200)
    assert first.returncode == 0, first.stderr[-3000:]
    report = tmp_path / "reports" / "topk" / "tiny"
    md = (report / "report.md").read_text()

    table = _table(md, "Table IV — step time and final accuracy")
    assert [row["label"] for row in table] == LABELS
    rows = {row["label"]: row for row in table}
    ours_ratio, ours_acc = "ours: step / reference", "ours: test acc (%, mean over seeds)"
    assert rows["dense_ring"][ours_ratio] == "1"  # our step over DenseSGD's own
    # Table IV's rows on AR-Topk (tree), the baseline on allgather, the switch under C1
    assert rows["star_topk_c0.001"]["collectives logged"] == "ar_tree"
    assert rows["var_topk_c0.001"]["collectives logged"] == "ar_tree"
    assert rows["ag_topk_c0.001"]["collectives logged"] == "allgather"
    assert rows["flex_topk_c0.1"]["collectives logged"] == "ar_tree, ar_ring, allgather"
    assert rows["flex_topk_c0.001"]["collectives logged"] == "allgather"
    for label in LABELS:
        assert float(rows[label][ours_acc]) > 0  # accuracy (%) was measured
    table_iv = [label for label in LABELS if re.fullmatch(r"(ag|star|var)_topk_c.*", label)]
    for label in table_iv:
        assert float(rows[label][ours_ratio]) < 1  # Top-k steps cost less than DenseSGD's
    assert rows["star_topk_c0.1"]["published: top-1 (%)"] == "90.19"
    assert rows["moo"]["published: step (ms)"] == "—"
    low, high = (float(x) for x in rows["moo"]["CR (logged)"].split(" to "))  # MOO's ratios
    assert 0.001 <= low <= high <= 0.1

    # outcome claims, then the model checks in a table of their own
    claims = _table(md, "Claims") + _table(md, CHECKS_TITLE)
    assert (len(_table(md, "Claims")), len(claims)) == (8, len(CLAIMS["claims"]))
    assert all(row["verdict"] == "not assessed" for row in claims)
    switch = next(row for row in claims if row["claim"] == "ar_at_low_bandwidth_low_compression")
    assert "flex_topk_c0.1 phase 1: ar_ring" in switch["how"]

    html = (report / "report.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', html)
    assert sorted(images) == sorted(f"{fid}.svg" for fid in [*FIGURES, "cr_pareto_front"])
    for img in images:
        assert (report / img).stat().st_size > 0
    # every figure is drawn, the CR front from the set's own Pareto search, whose study and
    # trials lie in the set's runs directory
    assert "Table IV" in html and not [ln for ln in md.splitlines() if "not drawn" in ln]
    (study,) = (tmp_path / "runs" / "topk_tiny").glob("topk_cr_pareto_tiny-*")
    assert len(list(study.glob("trial_*/summary.json"))) == 4
    assert f"Pareto search {study.name}, 4 completed of 4 trials" in md
    with (report / "cr_pareto_front.csv").open() as f:
        assert len(list(csv.DictReader(f))) >= 1
    assert "search: a Pareto search of 4 trials" in first.stdout

    # the repeat's report is the AdaComm set's test; here only what it runs
    second = repro_cli(*args, "--no-report", cwd=tmp_path, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    out = second.stderr + second.stdout
    assert out.count("finished earlier") == len(LABELS) and "run dense_ring\n" not in out
    assert f"sweep {study.name}: all 4 trials finished; nothing to run" in out
