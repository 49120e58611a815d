"""The AdaComm run set at test size: reproduce -> runs read back -> report; repeats skip."""

import re

import pytest

from tests.helpers import repro_cli, reproduce_tiny_args

SECTIONS = ("## Setup", "## Claims", "## Figures", "## Final metrics per run")


@pytest.mark.slow
def test_tiny_run_set_produces_full_report_and_repeat_skips(tmp_path):
    args = reproduce_tiny_args("adacomm", tmp_path)
    first = repro_cli(*args, cwd=tmp_path, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    # the tiny scale runs one seed; the expected time is printed before any run starts
    expected = "adacomm tiny: expected time: about "
    assert first.stdout.splitlines()[0].startswith(expected), first.stdout[:500]
    assert re.search(r"5 runs to do, \d+ at a time", first.stdout.splitlines()[0])
    report = tmp_path / "reports" / "adacomm"
    md = (report / "report.md").read_text()
    for section in SECTIONS:
        assert section in md
    for label in ("sync", "local_sgd_tau4", "local_sgd_tau16", "adacomm", "adacomm_lrdecay"):
        assert f"| {label} |" in md
    claims_part = md.split("## Claims")[1].split("## Figures")[0]
    rows = [ln for ln in claims_part.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(rows) == 6
    # the claims are stated for the small and paper scales: at tiny they are computed and shown
    # but not judged
    assert all("| not assessed | tiny |" in r for r in rows)
    assert "Seeds: 1." in md and "| seeds | 1 (0) |" in md
    assert re.search(r"method/tau 16 -> \d+", claims_part)
    html = (report / "report.html").read_text()
    for img in re.findall(r'<img src="([^"]+)"', html):
        assert (report / img).exists()
    assert len(list(report.glob("*.png"))) >= 4

    second = repro_cli(*args, cwd=tmp_path, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stderr.count("finished earlier") + second.stdout.count("finished earlier") == 5
    assert "expected time" not in second.stdout  # nothing left to run


@pytest.mark.parametrize("seeds", ["0", "-2", "two"])
def test_seeds_below_one_is_one_line_and_writes_nothing(tmp_path, seeds):
    args = reproduce_tiny_args("adacomm", tmp_path)
    proc = repro_cli(*args, f"seeds={seeds}", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"error: seeds={seeds} must be an integer >= 1 (how many seeds each run of the set "
        "runs; e.g. seeds=3)"
    )
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists()


@pytest.mark.slow
def test_report_before_any_run_is_a_clear_error(tmp_path):
    proc = repro_cli("report", "adacomm", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "repro reproduce adacomm" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_paper_scale_composes_and_starts_until_the_data_is_missing(tmp_path):
    proc = repro_cli(
        "train",
        "experiment=adacomm_paper",
        f"data.root={tmp_path}/cifar",
        f"runs_root={tmp_path}/runs",
        "tracking=disabled",
        cwd=tmp_path,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "cifar10" in proc.stderr and "data.root" in proc.stderr
