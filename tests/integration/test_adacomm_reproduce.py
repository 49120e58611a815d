"""The AdaComm run set at test size: reproduce -> runs read back -> report; repeats skip."""

import json
import re
import shutil

import pytest
import yaml

from repro.claims.calculators.final_values import final_metric
from repro.claims.fixed_terms import TERMS_FILE
from repro.track.runs import find_runs
from repro.track.series import label_of, seed_of
from tests.helpers import REPO, repro_cli, reproduce_tiny_args
from tests.integration.test_startup import probe_run

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
    report = tmp_path / "reports" / "adacomm" / "tiny"
    md = (report / "report.md").read_text()
    for section in SECTIONS:
        assert section in md
    for label in ("sync", "local_sgd_tau4", "local_sgd_tau16", "adacomm", "adacomm_lrdecay"):
        assert f"| {label} |" in md
    claims_part = md.split("## Claims")[1].split("\n## ")[0]
    checks_part = md.split("## Checks of the implementation")[1].split("\n## ")[0]
    rows = [ln for ln in claims_part.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    checks = [ln for ln in checks_part.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert (len(rows), len(checks[1:])) == (3, 3)  # outcome claims, then the model checks
    # the claims are stated for the small and paper scales: at tiny they are computed and shown
    # but not judged
    assert all("| not assessed | tiny |" in r for r in rows + checks[1:])
    assert "Seeds: 1." in md and "| seeds | 1 (0) |" in md
    # the page's own command reads the set's runs and writes where the set put the page
    regenerate = (
        f"repro report adacomm --runs {tmp_path}/runs --scale tiny --out {tmp_path}/reports"
    )
    assert f"- Regenerate: {regenerate}\n" in md
    assert re.search(r"method/tau 16 -> \d+", checks_part)
    html = (report / "report.html").read_text()
    for img in re.findall(r'<img src="([^"]+)"', html):
        assert (report / img).exists()
    assert len(list(report.glob("*.svg"))) >= 4

    # the repeat reads the finished runs and writes the report again without loading torch
    second, loaded = probe_run(tmp_path, *args, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert not any(m.split(".")[0] == "torch" for m in loaded), loaded
    assert second.stderr.count("finished earlier") + second.stdout.count("finished earlier") == 5
    # each skipped run says what it ended at and where, as a finished run's "done" line does
    skipped = re.findall(r"skip \S+: finished earlier: step=\d+ .*run_dir=(\S+)", second.stdout)
    assert len(skipped) == 5 and all((tmp_path / d / "summary.json").exists() for d in skipped)
    assert "expected time" not in second.stdout  # nothing left to run

    added_seeds_where_undecided(tmp_path, args)


def added_seeds_where_undecided(tmp_path, args):
    """Seeds added to an undecided claim's runs only, up to its cap, from the runs above: a
    claim banded exactly at sync's seed-0 final loss, so that any two seeds' interval
    straddles its edge (undecided at 2 seeds, inconclusive at the cap of 3), and a claim on
    AdaComm's final loss with a band no loss leaves, decided at 2 seeds."""
    (run,) = [r for r in find_runs(tmp_path / "runs") if label_of(r) == "sync"]
    v0 = final_metric({"sync": run}, run="sync", metric="train/loss").value

    def claim(cid, run, low, high):
        return {
            "id": cid,
            "kind": "outcome",
            "source": "test",
            "statement": "test",
            "metric": {
                "calculator": "final_metric",
                "params": {"run": run, "metric": "train/loss"},
            },
            "published": 1.0,
            "unit": "",
            "scales": ["tiny"],
            "band": {"at_least": low, "at_most": high, "reason": "placed for the test"},
        }

    head = {"paper": "adacomm", "title": "t", "citation": "c", "seed_cap": 10}
    claims = [claim("sync_loss", "sync", v0, v0), claim("adacomm_loss", "adacomm", 0.0, 1e6)]
    claims[0]["seed_cap"] = 3
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "adacomm.yaml").write_text(yaml.safe_dump({**head, "claims": claims}))
    claims_dir = ("--claims", str(tmp_path / "claims"))
    chosen = repro_cli(*args, "seeds=1", *claims_dir, cwd=tmp_path, timeout=600)
    assert chosen.returncode == 0, chosen.stderr[-3000:]
    # seeds=N on the command line is the user's number: nothing is added to it
    assert not [ln for ln in chosen.stdout.splitlines() if ": claim " in ln], chosen.stdout
    assert (
        "undecided at 1 seed"
        in (tmp_path / "reports" / "adacomm" / "tiny" / "report.md").read_text()
    )
    third = repro_cli(*args, *claims_dir, cwd=tmp_path, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    added = [ln for ln in third.stdout.splitlines() if ": claim " in ln]
    assert added[:2] == [
        "adacomm tiny: claim sync_loss: one seed at 1 seed (cap 3): adding seed 1 of sync",
        "adacomm tiny: claim adacomm_loss: one seed at 1 seed (cap 10): adding seed 1 of adacomm",
    ]
    assert re.fullmatch(
        rf"adacomm tiny: claim sync_loss: 95% CI \[[^]]+\] straddles {v0:.4g} at 2 seeds "
        r"\(cap 3\): adding seed 2 of sync",
        added[2],
    ), added
    assert len(added) == 3  # adacomm_loss decided at 2 seeds, sync_loss at its cap at 3
    # each round's expected time comes from what its runs took here at their first seeds
    timed = [ln for ln in third.stdout.splitlines() if "(added seeds): expected time" in ln]
    assert len(timed) == 2, third.stdout
    assert all(ln.endswith("from the same runs' earlier seeds here)") for ln in timed), timed
    made = sorted((label_of(r), seed_of(r)) for r in find_runs(tmp_path / "runs"))
    labels = ("local_sgd_tau4", "local_sgd_tau16", "adacomm_lrdecay")
    assert made == sorted(
        [("sync", s) for s in (0, 1, 2)]
        + [("adacomm", s) for s in (0, 1)]
        + [(x, 0) for x in labels]
    )
    md = (tmp_path / "reports" / "adacomm" / "tiny" / "report.md").read_text()
    sync_row = next(ln for ln in md.splitlines() if ln.startswith("| sync_loss |"))
    assert re.search(r"\| inconclusive at 3 seeds, CI \[[^]]+\] \|", sync_row), sync_row
    assert "seed 0: " in sync_row and "seed 2: " in sync_row
    assert "| reproduced |" in next(ln for ln in md.splitlines() if ln.startswith("| adacomm_loss"))
    runs_made_otherwise(tmp_path, args, claims_dir)


def runs_made_otherwise(tmp_path, args, claims_dir):
    """The set again with another learning rate: said before the runs, no seed added, and
    the report keeps the set's own runs; once a set run is gone, the claim reading the run
    standing in for it is not assessed, naming the setting."""
    other = repro_cli(*args, "optim.lr=0.04", *claims_dir, cwd=tmp_path, timeout=600)
    assert other.returncode == 0, other.stderr[-3000:]
    said = (
        "adacomm tiny with optim.lr=0.04 (set: 0.05): not the adacomm_tiny run set's runs, so "
        "a report assesses no claim on them (it reads the set's own where they exist)"
    )
    assert other.stdout.splitlines()[0] == said + " and no seeds are added"
    # said without a report too (the runs are made, now finished: skipped)
    quiet = repro_cli(*args, "optim.lr=0.04", "--no-report", cwd=tmp_path, timeout=600)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert quiet.stdout.splitlines()[0] == said
    assert not [ln for ln in other.stdout.splitlines() if ": claim " in ln], other.stdout
    md = (tmp_path / "reports" / "adacomm" / "tiny" / "report.md").read_text()
    assert "| reproduced |" in next(ln for ln in md.splitlines() if ln.startswith("| adacomm_loss"))
    assert re.search(r"kept run \w+ \(the run set's own\)", md)
    (own,) = [
        r.path
        for r in find_runs(tmp_path / "runs")
        if (label_of(r), seed_of(r), r.config["optim"]["lr"]) == ("adacomm", 0, 0.05)
    ]
    shutil.rmtree(own)
    report = repro_cli(
        "report",
        "adacomm",
        "--runs",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "reports"),
        *claims_dir,
        cwd=tmp_path,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    md = (tmp_path / "reports" / "adacomm" / "tiny" / "report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| adacomm_loss"))
    assert "| not assessed |" in row and "optim.lr=0.04 (set: 0.05)" in row, row
    assert "| reproduced |" not in row
    assert (
        "Runs not the adacomm_tiny run set's, made with other settings: adacomm (seed 0: "
        "optim.lr=0.04 (set: 0.05))."
    ) in md
    summary = md.split("## Summary")[1].split("\n## ")[0]
    assert "not assessed: its runs are not the run set's (optim.lr=0.04 (set: 0.05))" in summary


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


@pytest.mark.slow
def test_a_reproduction_records_its_claims_and_its_report_names_a_band_moved_since(tmp_path):
    """A band edited once the runs exist judged those runs by terms chosen with their
    results in view, and the page gave no sign of it."""
    data = yaml.safe_load((REPO / "reports" / "claims" / "adacomm.yaml").read_text())
    tiny = {**data["claims"][0], "scales": ["tiny", "small", "paper"], "seed_cap": 3}
    data["claims"] = [tiny, *data["claims"][1:]]
    (tmp_path / "adacomm.yaml").write_text(yaml.safe_dump(data))
    runs, reports = tmp_path / "runs", tmp_path / "reports"
    args = ["adacomm", "scale=tiny", f"runs_root={runs}", f"data.root={tmp_path / 'data'}"]
    proc = repro_cli("reproduce", *args, "--claims", str(tmp_path), "--reports", str(reports))
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads((runs / "adacomm_tiny" / TERMS_FILE).read_text())["claims"]
    assert recorded[tiny["id"]]["terms"]["band"] == {
        k: v for k, v in tiny["band"].items() if k != "reason"
    }
    page = (reports / "adacomm" / "tiny" / "report.md").read_text()
    assert "its terms moved" not in page

    old = tiny["band"]["at_least"]
    tiny["band"]["at_least"] = 0.01
    (tmp_path / "adacomm.yaml").write_text(yaml.safe_dump(data))
    out = ["--runs", str(runs), "--out", str(reports), "--claims", str(tmp_path)]
    proc = repro_cli("report", "adacomm", "--scale", "tiny", *out)
    assert proc.returncode == 0, proc.stderr
    page = (reports / "adacomm" / "tiny" / "report.md").read_text()
    assert (
        f'not assessed: its terms moved after its runs began (band was {{"at_least": {old}' in page
    )
