"""Reports from a tiny AdaComm reproduction, checked in headless Chromium (Debian's package).

One reproduction per module (`repro reproduce adacomm scale=tiny`, then `repro report all`)
serves the index, browser and comparison tests; the page-check tests build their pages from
synthetic runs in tmp_path (seconds). The browser tests skip only when Chromium is absent and
cannot be installed (not root) outside CI; in CI (env CI set) they must run.
"""

import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

from repro.checks.browser import check_pages, find_browser
from repro.checks.browser import main as check_main
from repro.claims.claims_file import load_claims
from repro.pages.writer import fmt
from repro.report.build import render_parts, select_runs
from repro.track.runs import read_run
from tests.helpers import REPO, repro_cli
from tests.unit.report_data import adacomm_set, in_directories

pytestmark = pytest.mark.slow
LABELS = ("sync", "local_sgd_tau4", "local_sgd_tau16", "adacomm", "adacomm_lrdecay")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    proc = repro_cli(
        "reproduce",
        "adacomm",
        "scale=tiny",
        f"runs_root={root / 'runs'}",
        f"data.root={root / 'data'}",
        "--no-report",
        cwd=root,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = repro_cli("report", "all", "--runs", "runs", "--out", "reports", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def chromium() -> str:
    proc = subprocess.run(
        [str(REPO / "scripts" / "ensure-chromium")], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        if os.environ.get("CI") or os.geteuid() == 0:
            pytest.fail(f"scripts/ensure-chromium failed: {proc.stderr.strip()}")
        pytest.skip("chromium is not installed and this user cannot install it")
    return find_browser()


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_index_has_the_claims_table_figures_environment_and_papers_not_run(built):
    reports = built / "reports"
    md = (reports / "index.md").read_text()
    table = md.split("## Claims at scale tiny")[1].split("\n## ")[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| adacomm |")]
    # the index counts outcome claims only; the model checks stay on the paper's page
    claims = load_claims("adacomm", REPO / "reports" / "claims").claims
    outcomes = [c for c in claims if c.kind == "outcome"]
    assert 0 < len(outcomes) < len(claims)
    assert len(rows) == len(outcomes) and all("| not assessed | tiny |" in r for r in rows)
    assert {c.id for c in outcomes} == {r.split("|")[2].strip() for r in rows}
    assert all("[adacomm](adacomm/tiny/report.html)" in r for r in rows)
    assert "Claims at scale small" not in md
    for paper in ("topk", "adasum"):
        assert f"| {paper} |" in md and f"repro reproduce {paper} scale=small" in md
    assert "Regenerate: `repro report adacomm --runs runs --scale tiny --out reports`" in md
    assert re.search(r"\| git commit \| [0-9a-f]{40}", md)
    assert f"| CPU | {os.cpu_count()} logical cores" in md
    html = (reports / "index.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', html)
    figures = list((reports / "adacomm" / "tiny").glob("*.svg"))
    assert len(images) == len(figures) == 5
    assert all((reports / src).is_file() for src in images)


def test_every_page_loads_its_images_without_console_errors(built, chromium):
    reports = built / "reports"
    proc = repro_cli("report", "check", "reports", cwd=built)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 of 2 pages passed" in proc.stdout
    checks = check_pages(
        [reports / "index.html", reports / "adacomm" / "tiny" / "report.html"], chromium
    )
    for check in checks:
        assert check.ok, check.problems()
        assert check.images == 5  # the AdaComm figures, inline in the index too
        assert not check.overflow and not check.broken_links and check.links > 0
        width, height = _png_size(check.screenshot)
        assert width == 1280 and height >= 2000
        assert check.screenshot.parent == check.page.parent


def test_the_check_reports_a_missing_image_and_console_errors(built, chromium, tmp_path):
    page = tmp_path / "broken.html"
    (tmp_path / "fine.svg").write_bytes(
        (built / "reports" / "adacomm" / "tiny" / "loss_vs_step.svg").read_bytes()
    )
    page.write_text(
        '<!DOCTYPE html><html><body><img src="fine.svg"><img src="gone.png">'
        "<script>console.error('bad number'); undefinedFunction();</script></body></html>"
    )
    (check,) = check_pages([page], chromium)
    assert check.images == 2 and check.broken_images == ["gone.png"]
    assert any("bad number" in e for e in check.console_errors)
    assert any("undefinedFunction" in e for e in check.console_errors)
    assert any("gone.png" in e for e in check.console_errors)  # the failed load itself
    proc = repro_cli("report", "check", str(page), cwd=tmp_path)
    assert proc.returncode == 1 and "image did not load: gone.png" in proc.stdout
    # a screenshot folder that cannot be made is one line before the browser starts
    proc = repro_cli("report", "check", str(page), "--screenshots", "/dev/null/s", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == (
        "error: /dev/null/s: not a directory; a file, not a folder, is on that path; set "
        "--screenshots elsewhere\n"
    )


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[Path, list]:
    """A report page over two seeds of synthetic AdaComm runs, each in its own directory."""
    root = tmp_path_factory.mktemp("synthetic")
    runs = in_directories([*adacomm_set(), *adacomm_set(seed=1)], root / "runs")
    claims = load_claims("adacomm", REPO / "reports" / "claims")
    scale, chosen, _, _ = select_runs(runs, "adacomm", None, "runs")
    page = root / "reports" / "adacomm" / "report.html"
    render_parts(claims, chosen, scale, page.parent, command="x")
    return page, runs


def test_a_report_fits_1280_px_and_its_links_lead_to_the_runs(synthetic, chromium, capsys):
    page, runs = synthetic
    shots = page.parents[2] / "shots"
    (check,) = check_pages([page], chromium, screenshots=shots)
    assert check.ok, check.problems()
    assert not check.overflow and check.broken_links == []
    # every link was followed: the runs' directories, the claims' rows
    assert check.links == page.read_text().count("<a ") > len(runs)
    assert check.screenshot == shots / "report.screenshot.png"
    assert _png_size(check.screenshot)[0] == 1280

    # a run directory gone: every link to it is broken, and the check fails the page
    gone = next(r for r in runs if (r.name, r.config["seed"]) == ("sync", 1))
    gone.path.rmdir()
    try:
        assert check_main([str(page)]) == 1
    finally:
        gone.path.mkdir()
    (line, total) = capsys.readouterr().out.splitlines()
    href = "../../runs/adacomm_small/sync-s1/"
    assert line.startswith(f"FAILED: {page}: broken link: {href} (")
    assert total == "0 of 1 pages passed"


def test_the_check_fails_a_page_wider_than_its_window(synthetic, chromium):
    page, _ = synthetic
    html = page.read_text()
    # a long line that cannot wrap, outside any scroll box, right after the summary; and
    # the same line inside a box that scrolls, which leaves the page its width
    wide = '<p style="white-space: nowrap">' + "word " * 400 + "</p>"
    over, boxed = page.with_name("over.html"), page.with_name("boxed.html")
    over.write_text(html.replace('<p class="rule">', wide + '<p class="rule">', 1))
    boxed.write_text(html.replace('<p class="rule">', f'<div class="table-wrap">{wide}</div>', 1))
    wider, fits = check_pages([over, boxed], chromium)
    assert not wider.ok and wider.broken_links == [] and wider.images == html.count("<img ")
    assert re.fullmatch(
        r"\d+ px of content in a 1280 px window \(\d+ px inside its scrollbar\); sticking "
        r"out: <p> under 'Summary', right edge at \d+ px",
        wider.overflow,
    )
    assert fits.ok, fits.problems()


def _run_dir(built: Path, label: str) -> Path:
    (path,) = (built / "runs" / "adacomm_tiny").glob(f"{label}-*")
    return path


def _table(html: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", html)[1:]
    return [re.findall(r"<td>(.*?)</td>", row) for row in rows]


def test_compare_overlays_two_runs_with_their_last_points(built, tmp_path):
    dirs = [_run_dir(built, "sync"), _run_dir(built, "local_sgd_tau4")]
    out = tmp_path / "cmp"
    args = ["--metric", "train/loss", "--x", "step", "--out", str(out)]
    proc = repro_cli("report", "compare", *map(str, dirs), *args, cwd=built)
    assert proc.returncode == 0, proc.stderr
    assert _png_size(out / "compare.png")[0] > 0
    rows = _table((out / "compare.html").read_text())
    assert [r[:2] for r in rows] == [
        ["Fully synchronous SGD", "sync"],
        ["PASGD (τ = 4)", "local_sgd_tau4"],
    ]
    for row, path in zip(rows, dirs, strict=True):
        run = read_run(path)
        logged = [(h["step"], h["train/loss"]) for h in run.history if "train/loss" in h]
        assert row[3] == run.run_id and row[4] == str(len(logged))
        assert row[5] == fmt(float(logged[-1][0])) and row[6] == fmt(logged[-1][1])


def test_compare_by_group_and_unknown_names(built, tmp_path):
    proc = repro_cli("report", "compare", "adacomm_tiny", "--out", str(tmp_path), cwd=built)
    assert proc.returncode == 0, proc.stderr
    assert sorted(r[1] for r in _table((tmp_path / "compare.html").read_text())) == sorted(LABELS)
    bad = repro_cli("report", "compare", "no_such_group", cwd=built)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == (
        "error: 'no_such_group' is not a run directory, run id or group under runs "
        "(groups: adacomm_tiny)"
    )
