"""A full or read-only disk ends a write with one line naming the file and the fix.

Each test mounts a real tmpfs of its own (the suite runs as root in CI) and fills it, so
the writers meet a real ENOSPC or EROFS from the kernel. Checked: the one-line message, no
temporary file left behind, and the last good checkpoint still loading.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from repro.claims.claims_file import load_claims
from repro.cluster.jobs import JOBS_FILE, JobRecord, append_records, read_records
from repro.errors import UserError
from repro.report.build import render_parts, select_runs
from repro.report.compare import main as compare_main
from repro.schemas.tracking import TrackingConfig
from repro.storage import check_creatable
from repro.track.runs import read_run
from repro.track.wandb_run import Tracker
from repro.train import checkpoint
from repro.workload.data import mnist1d
from tests.helpers import REPO, repro_cli
from tests.unit.report_data import adacomm_set, write_offline_runs

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"

FULL = "no space left on device; free space or set {} elsewhere"


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs mounted for this test only."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    up = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if up.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({up.stderr.strip()}); these tests need root")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def fill(mnt: Path) -> Path:
    """Take every free block of `mnt`; deleting the returned file frees them again."""
    filler = mnt / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
        try:  # the last partial block
            while True:
                f.write(b"\0")
        except OSError:
            pass
    return filler


def remount_read_only(mnt: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.name.endswith(".tmp")]


def _state(seed: int) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Linear(128, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(8, 128)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict()}


def test_full_disk_during_a_checkpoint_keeps_the_last_good_one(small_fs):
    run_dir = small_fs / "run"
    checkpoint.record_run_dir(run_dir, {"seed": 0})
    good = _state(1)
    checkpoint.save_rank(run_dir, 20, 0, good)
    checkpoint.commit(run_dir, 20, "h", 1)
    filler = fill(small_fs)

    with pytest.raises(UserError) as err:
        checkpoint.save_rank(run_dir, 40, 0, _state(2))
    target = run_dir / "checkpoints" / "step_00000040" / "rank0.pt"
    assert str(err.value) == f"{target}: {FULL.format('run_dir')}"
    assert temporaries(small_fs) == []
    loaded = checkpoint.load_rank(run_dir, 0, "h")
    assert torch.equal(loaded["model"]["weight"], good["model"]["weight"])
    assert loaded["optimizer"]["state"][0]["momentum_buffer"].shape == (64, 128)

    # Space freed, the run starts again: the cut-short step directory is gone.
    filler.unlink()
    checkpoint.record_run_dir(run_dir, {"seed": 0})
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "latest.json",
        "step_00000020",
    ]


def test_full_disk_writing_the_summary(small_fs):
    run_dir = small_fs / "run"
    checkpoint.record_run_dir(run_dir, {"seed": 0})
    fill(small_fs)
    with pytest.raises(UserError) as err:
        checkpoint.write_json(run_dir / "summary.json", {"step": 40, "test/acc": 0.9})
    assert str(err.value) == f"{run_dir / 'summary.json'}: {FULL.format('run_dir')}"
    assert not (run_dir / "summary.json").exists()
    assert temporaries(small_fs) == []


def test_read_only_run_dir(small_fs):
    run_dir = small_fs / "run"
    checkpoint.record_run_dir(run_dir, {"seed": 0})
    remount_read_only(small_fs)
    with pytest.raises(UserError) as err:
        checkpoint.save_rank(run_dir, 20, 0, _state(1))
    target = run_dir / "checkpoints" / "step_00000020" / "rank0.pt"
    assert str(err.value) == (
        f"{target}: read-only file system; make it writable or set run_dir elsewhere"
    )
    with pytest.raises(UserError) as err:
        checkpoint.check_run_dir(run_dir, {"seed": 0})
    assert "cannot be written (Read-only file system)" in str(err.value)


def test_a_folder_that_could_not_be_made_is_refused_before_it_is_needed(small_fs):
    reports = small_fs / "reports" / "adacomm"
    check_creatable(reports, "--reports")  # room and writable: passes, making nothing
    filler = fill(small_fs)
    with pytest.raises(UserError) as err:
        check_creatable(reports, "--reports")
    assert str(err.value) == f"{reports}: {FULL.format('--reports')}"
    filler.unlink()
    remount_read_only(small_fs)
    with pytest.raises(UserError, match="read-only file system; make it writable or set --r"):
        check_creatable(reports, "--reports")
    assert list(small_fs.iterdir()) == []


def test_full_data_root_leaves_no_temporary_file(small_fs):
    fill(small_fs)
    with pytest.raises(UserError) as err:
        mnist1d(str(small_fs / "data"), num_samples=1000, seed=0)
    target = small_fs / "data" / "mnist1d_n1000_s0.npz"
    assert str(err.value) == f"{target}: {FULL.format('data.root')}"
    assert temporaries(small_fs) == []
    assert not target.exists()


def test_a_jobs_record_on_a_full_disk_is_one_line_and_the_records_before_it_stay(small_fs):
    def job(i: int) -> JobRecord:
        return JobRecord(str(2**22 + i), "run", f"run{i}", "slurm", str(small_fs / "jobs"))

    """A submission's records meet the full disk (more than the file's last block holds):
    one line naming the file, and the file still reads back whole records, in order."""
    append_records(small_fs, [job(0)])
    fill(small_fs)
    with pytest.raises(UserError) as err:
        append_records(small_fs, [job(i) for i in range(1, 41)])
    assert str(err.value) == f"{small_fs / JOBS_FILE}: {FULL.format('runs_root')}"
    labels = [r.label for r in read_records(small_fs)]
    assert labels == [f"run{i}" for i in range(len(labels))] and len(labels) < 41


def test_a_page_on_a_disk_that_fills_leaves_the_previous_page_whole(small_fs):
    """A report's figures and pages are written in a folder of their own and moved in
    together: a disk that fills while they are drawn leaves the last page as it was, with
    no figure of the new one beside it, and says so in one line."""
    claims = load_claims("adacomm", CLAIMS_DIR)
    _, runs, _, _ = select_runs(adacomm_set(), "adacomm", None, "runs")
    page = small_fs / "reports" / "adacomm"
    render_parts(claims, runs, "small", page, command="repro report adacomm")
    before = {p.name: p.read_bytes() for p in page.iterdir()}
    assert "report.html" in before and any(name.endswith(".svg") for name in before)
    fill(small_fs)
    with pytest.raises(UserError) as err:
        render_parts(claims, runs, "small", page, command="repro report adacomm --out x")
    assert str(err.value) == f"{page}: {FULL.format('--out')}"
    assert {p.name: p.read_bytes() for p in page.iterdir()} == before


def test_compare_on_a_full_disk_writes_nothing(small_fs, tmp_path):
    write_offline_runs(tmp_path / "runs", adacomm_set()[:2])
    out = small_fs / "compare"
    fill(small_fs)
    with pytest.raises(UserError) as err:
        compare_main(["adacomm_small", "--runs", str(tmp_path / "runs"), "--out", str(out)])
    assert str(err.value) == f"{out}: {FULL.format('--out')}"
    assert list(out.iterdir()) == []


def test_a_sweep_trial_whose_disk_is_full_is_queued_again_not_counted(small_fs, tmp_path):
    """A full disk under a trial's run is no outcome of its point: the worker ends on one
    line naming the run directory, the trial is marked so and its point queued again, and
    once there is room the next sweep runs it, resuming in the same run directory, to the
    full budget. The study is in SQLite beside; the trials' run directories (`out:`) are on
    the full disk."""
    raw = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())
    raw["overrides"] += ["tracking=disabled", f"data.root={tmp_path / 'data'}"]
    raw.update(out=str(small_fs), n_trials=2, storage=f"sqlite:///{tmp_path / 'study.db'}")
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(raw))
    sweep = ("sweep", str(spec), "--workers", "1")
    filler = fill(small_fs)

    refused = repro_cli(*sweep, cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    (line,) = [ln for ln in refused.stderr.splitlines() if ln.startswith("error:")]
    assert line.endswith(
        "trial_0 cannot be written (No space left on device); pass a writable runs_root=... "
        "(or run_dir=..., the run's own folder)"
    )
    filler.unlink()
    done = repro_cli(*sweep, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = repro_cli("sweep", "show", str(spec), cwd=tmp_path).stdout
    assert "2 complete, 1 failed" in shown, shown
    assert (
        "failed trial 0: its disk refused a write (full or read-only); its point runs again"
        in shown
    )
    retry = json.loads((small_fs / "tiny" / "trial_0" / "summary.json").read_text())
    assert retry["step"] == 20  # the queued point ran in trial 0's run directory


def test_a_sweep_whose_journal_disk_is_full_says_so_in_one_line(small_fs, tmp_path):
    raw = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())
    raw["overrides"] += ["tracking=disabled", f"data.root={tmp_path / 'data'}"]
    raw.update(out=str(small_fs), n_trials=2)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(raw))
    fill(small_fs)
    refused = repro_cli("sweep", str(tmp_path / "tiny.yaml"), "--workers", "1", cwd=tmp_path)
    journal = small_fs / "tiny" / "journal.log"
    setting = "the spec's `out:`"
    assert refused.returncode == 2
    assert refused.stderr.strip() == f"error: {journal}: {FULL.format(setting)}"


def test_a_run_set_reads_its_finished_runs_from_a_read_only_root_and_stops_on_new_ones(
    small_fs, tmp_path
):
    """Finished runs are only read: their set's report is built from a read-only runs root
    (a colleague's, an archive). Runs still to make stop the set at the first, in one line:
    the disk is every run's, not one run's damage to list and step over."""
    adacomm = ("reproduce", "adacomm", "scale=tiny", f"runs_root={small_fs}/runs")
    made = repro_cli(*adacomm, "--reports", str(tmp_path / "first"), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    remount_read_only(small_fs)
    again = repro_cli(*adacomm, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "adacomm tiny: every run has finished" in again.stdout
    skipped = re.findall(r"skip \S+: finished earlier: .* run_dir=(\S+)", again.stdout)
    assert len(skipped) == 5 and all(d.startswith(f"{small_fs}/runs/") for d in skipped)
    assert (tmp_path / "reports" / "adacomm" / "tiny" / "report.html").is_file()
    new = repro_cli("reproduce", "topk", "scale=tiny", f"runs_root={small_fs}/runs", cwd=tmp_path)
    assert new.returncode == 2 and new.stdout.count("\n") <= 2, new.stdout
    assert re.fullmatch(
        rf"error: the run folder {small_fs}/runs/topk_tiny/\S+ cannot be written \(Read-only "
        r"file system\); pass a writable runs_root=\.\.\. \(or run_dir=\.\.\., the run's "
        r"own folder\)\n",
        new.stderr,
    ), new.stderr


def test_a_finished_sweep_on_a_read_only_disk_is_shown(small_fs, tmp_path):
    """Showing a sweep reads its journal without Optuna's lock (a symlink it would make
    beside it), so a finished study on a read-only disk still prints its front; only the
    plot files it cannot write are refused, in one line."""
    raw = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())
    raw["overrides"] += ["tracking=disabled", f"data.root={tmp_path / 'data'}"]
    raw.update(out=str(small_fs), n_trials=2)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(raw))
    assert repro_cli("sweep", str(spec), "--workers", "1", cwd=tmp_path).returncode == 0
    remount_read_only(small_fs)
    shown = repro_cli("sweep", "show", str(spec), cwd=tmp_path)
    assert shown.returncode == 2 and "Pareto front" in shown.stdout, shown.stderr
    assert shown.stderr == (
        f"error: {small_fs / 'tiny'}: read-only file system; make it writable or set the "
        "spec's `out:` elsewhere\n"
    )


@pytest.fixture
def wandb_service(small_fs):
    """Ends this process's wandb service after the test, before its disk is unmounted.

    A service whose disk filled up or went away stays wedged, and every later `repro`
    command started from this process (WANDB_SERVICE is inherited) would use it."""
    yield
    import wandb

    wandb.teardown()


def _tracker(run_dir: Path) -> Tracker:
    return Tracker(
        TrackingConfig(mode="offline"),
        run_dir=run_dir,
        name="full",
        group=None,
        job_type=None,
        config={"seed": 0},
    )


def test_wandb_run_on_a_full_disk(small_fs, wandb_service, capfd):
    tracker = _tracker(small_fs / "run")
    tracker.log({"train/loss": 2.3}, step=10)
    fill(small_fs)
    with pytest.raises(UserError) as err:
        tracker.log({"train/loss": 1.1}, step=20)
    msg = str(err.value)
    assert re.fullmatch(rf".*/run-[a-z0-9]+\.wandb: {FULL.format('run_dir')}", msg), msg
    assert msg.startswith(str(small_fs / "run" / "wandb" / "offline-run-"))
    # The run is failing already: finish neither waits out its 30 s nor adds noise.
    started = time.monotonic()
    tracker.finish(exit_code=1)
    assert time.monotonic() - started < 10
    assert "Traceback" not in capfd.readouterr().err


def test_wandb_finish_after_success_on_a_full_disk(small_fs, wandb_service):
    tracker = _tracker(small_fs / "run")
    tracker.log({"train/loss": 2.3}, step=10)
    fill(small_fs)
    # A summary larger than what is left of the file's last page: wandb cannot write it,
    # nor the exit record after it.
    tracker.set_summary({"notes": "x" * 200_000})
    with pytest.raises(UserError, match=FULL.format("run_dir")):
        tracker.finish()


def test_wandb_refuses_a_read_only_run_dir(small_fs, wandb_service):
    (small_fs / "run").mkdir()
    remount_read_only(small_fs)
    with pytest.raises(UserError) as err:
        _tracker(small_fs / "run")
    assert str(err.value) == (
        f"{small_fs / 'run' / 'wandb'}: read-only file system; "
        "make it writable or set run_dir elsewhere"
    )


TRAIN = [
    "workload=synthetic_mlp",
    "trainer.world_size=2",
    "trainer.batch_size=16",
    # 580 steps after the first checkpoint (seconds) for the disk to fill before the run ends
    "trainer.steps=600",
    "trainer.eval_every=50",
    "trainer.checkpoint_every=20",
    "trainer.progress=false",
    "optim.name=sgd",
    "optim.lr=0.05",
    "compute.mode=sampled",
    "tracking=wandb_offline",
]


@pytest.mark.slow
def test_train_on_a_disk_that_fills_up_then_resume(small_fs, tmp_path):
    exe = Path(sys.executable).parent / "repro"
    run_dir = small_fs / "run"
    cmd = [str(exe), "train", *TRAIN, f"run_dir={run_dir}", f"data.root={tmp_path / 'data'}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    latest = run_dir / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 300
    while not latest.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before its first checkpoint; make it longer"
    filler = fill(small_fs)
    _, stderr = proc.communicate(timeout=300)

    assert proc.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    where = re.escape(str(run_dir))
    assert re.fullmatch(rf"error: {where}/\S+: {FULL.format('run_dir')}", lines[0]), lines[0]
    assert temporaries(run_dir) == []
    good = checkpoint.latest_step(run_dir)
    assert good >= 20 and not (run_dir / "summary.json").exists()

    filler.unlink()
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["step"] == 600
    assert read_run(run_dir).history[-1]["step"] == 600
