"""The Flexible Top-k run set at test size: reproduce -> runs read back -> report with the
Table-IV-like table and every figure; a repeat skips every finished run."""

import re

import pytest
import yaml

from repro.config import CONFIG_DIR
from tests.helpers import REPO, repro_cli, reproduce_tiny_args

TINY = yaml.safe_load((CONFIG_DIR / "experiment" / "topk_tiny.yaml").read_text())
LABELS = list(TINY["experiment"]["runs"])
CLAIMS = yaml.safe_load((REPO / "reports" / "claims" / "topk.yaml").read_text())
FIGURES = [figure["id"] for figure in CLAIMS["figures"]]


def _table(md: str, title: str) -> list[list[str]]:
    """The body rows of the Markdown table under `## title`, split into cells."""
    part = md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in part.splitlines() if ln.startswith("| ") and "---" not in ln]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[1:]]


@pytest.mark.slow
def test_tiny_run_set_produces_table_iv_and_every_figure_and_repeat_skips(tmp_path):
    args = reproduce_tiny_args("topk", tmp_path)
    first = repro_cli(*args, cwd=tmp_path, timeout=1200)
    assert first.returncode == 0, first.stderr[-3000:]
    report = tmp_path / "reports" / "topk"
    md = (report / "report.md").read_text()

    table = _table(md, "Table IV — step time and final accuracy")
    assert [row[1] for row in table] == LABELS
    rows = {row[1]: row for row in table}
    assert rows["dense_ring"][5] == "1"  # our step over DenseSGD's own
    assert rows["star_topk_c0.1"][3] == "allgather, ar_ring"  # switched with the network
    assert rows["ag_topk_c0.001"][3] == "allgather"
    for label in LABELS:
        assert float(rows[label][6]) > 0  # accuracy (%) was measured
    for label in LABELS[1:-1]:
        assert float(rows[label][5]) < 1  # Top-k steps cost less than DenseSGD's
    assert rows["star_topk_c0.1"][9] == "90.19" and rows["moo"][7] == "—"
    low, high = (float(x) for x in rows["moo"][2].split(" to "))  # the ratios MOO logged
    assert 0.001 <= low <= high <= 0.1

    claims = _table(md, "Claims")
    assert len(claims) == 7 and all(row[5] == "not assessed" for row in claims)
    switch = next(row for row in claims if row[0] == "ar_at_low_bandwidth_low_compression")
    assert "star_topk_c0.1 phase 1: ar_ring" in switch[7]

    html = (report / "report.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', html)
    assert sorted(images) == sorted(f"{fid}.png" for fid in FIGURES)
    for img in images:
        assert (report / img).stat().st_size > 0
    # every run figure is drawn; only the sweep's CR front waits for `repro sweep`
    missing = [ln for ln in md.splitlines() if "not drawn" in ln]
    assert "Table IV" in html and len(missing) == 1
    assert "repro sweep sweeps/topk_cr_pareto.yaml" in missing[0]

    second = repro_cli(*args, cwd=tmp_path, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    out = second.stderr + second.stdout
    assert out.count("finished earlier") == len(LABELS) and "run dense_ring\n" not in out
