"""`cluster=submitit_local`: the submission path without a scheduler.

The job runs detached through submitit's LocalExecutor, two task processes whose ranks and
rendezvous come from submitit's job environment, exactly as on SLURM; `repro train` returns
at once and `repro jobs --watch` follows the job by its process and result file.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
import torch

from repro.cluster.submit import submit_run
from repro.config import compose, run_dir_of
from repro.train import checkpoint
from tests.helpers import TINY, repro_cli, reproduce_tiny_args, train

pytestmark = pytest.mark.slow
# A submitit launch runs processes; the spawned twin is pinned to the same engine.
TWO_WORKERS = [
    *TINY,
    "trainer.world_size=2",
    "trainer.engine=processes",
    "compute.mode=sampled",
    "network=eth1g",
]


@pytest.mark.timeout(300)
def test_two_task_local_job_equals_the_spawned_run(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    submitted = repro_cli(
        "train",
        *TWO_WORKERS,
        "cluster=submitit_local",
        "tracking=disabled",
        f"runs_root={root}",
        f"data.root={tmp_path / 'data'}",
        cwd=tmp_path,
    )
    assert submitted.returncode == 0, submitted.stderr
    found = re.search(r"submitted sync: job (\d+) run_dir=(\S+)", submitted.stdout)
    assert found is not None, submitted.stdout
    job_id, run_dir = found.group(1), Path(found.group(2))
    assert f"train: 1 run in job {job_id} (recorded in" in submitted.stdout

    watched = repro_cli("jobs", "--root", str(root), "--watch", "--interval", "1", timeout=240)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    log = root / "slurm" / f"{job_id}_0_log.out"
    assert re.search(rf"^{job_id}\s+run\s+sync\s+COMPLETED\s+{log}$", watched.stdout, re.M)
    assert watched.stdout.rstrip().endswith("1 job: 1 COMPLETED")
    assert f"run {run_dir}: 2 workers, from step 0" in log.read_text()
    # a job for the finished run (a requeue after its end) says so, not "from step 0"
    cfg = compose(
        [*TWO_WORKERS, "cluster=submitit_local", "tracking=disabled", f"runs_root={root}"]
        + [f"data.root={tmp_path / 'data'}"]
    )
    again = submit_run(cfg)
    again.results()
    assert f"run {run_dir}: 2 workers, finished earlier" in Path(again.paths.stdout).read_text()

    local = train(tmp_path / "local", *TWO_WORKERS)
    a = json.loads((run_dir / "summary.json").read_text())
    for key in ("step", "train/loss", "test/loss", "test/acc", "comm/bytes", "time/modeled_s"):
        assert a[key] == local[key], key
    ma = torch.load(run_dir / "final_model.pt")
    mb = torch.load(Path(local["run_dir"]) / "final_model.pt")
    assert all(torch.equal(ma[k], mb[k]) for k in mb)


def _task_pids(controller: int) -> list[int]:
    """The task processes submitit's local controller started (its direct children)."""
    children = Path(f"/proc/{controller}/task/{controller}/children").read_text().split()
    return [int(pid) for pid in children]


@pytest.mark.timeout(300)
def test_time_limit_signal_checkpoints_requeues_and_resumes_exactly(tmp_path: Path) -> None:
    cfg = compose(
        [
            *TWO_WORKERS,
            # 50 ms of modeled compute per step, really slept: long enough to interrupt (the
            # signal comes at step 60 or later, at least 3 s before step 120)
            "compute.dist=constant",
            "compute.mean_ms=50",
            "network.inject=true",
            "trainer.steps=120",
            "cluster=submitit_local",
            "tracking=disabled",
            f"runs_root={tmp_path / 'runs'}",
            f"data.root={tmp_path / 'data'}",
        ]
    )
    job = submit_run(cfg)
    try:
        deadline = time.monotonic() + 200
        while checkpoint.latest_step(run_dir_of(cfg)) < 60:
            assert time.monotonic() < deadline, "no checkpoint of step 60 in time"
            time.sleep(0.2)
        # What submitit sends every task shortly before the time limit (SLURM: --signal).
        for pid in _task_pids(int(job.job_id)):
            os.kill(pid, signal.SIGUSR2)
        while not job.done():
            assert time.monotonic() < deadline, f"job {job.job_id} not done in time"
            time.sleep(0.5)
        summary = job.results()[0]  # rank 0 returns the summary
    finally:
        job.cancel(check=False)
    log = Path(job.paths.stdout).read_text() + Path(job.paths.stderr).read_text()
    starts = [int(s) for s in re.findall(r"2 workers, from step (\d+)", log)]
    assert starts[0] == 0 and len(starts) == 2 and starts[1] >= 60, starts
    assert "Calling checkpoint method." in log and "Requeued job" in log

    local = train(
        tmp_path / "local",
        *TWO_WORKERS,
        "compute.dist=constant",
        "compute.mean_ms=50",
        "trainer.steps=120",
    )
    for key in ("step", "train/loss", "test/loss", "test/acc", "comm/bytes", "time/modeled_s"):
        assert summary[key] == local[key], key


@pytest.mark.timeout(600)
def test_a_submitted_run_set_names_the_report_command_that_reads_its_runs(tmp_path: Path) -> None:
    """The line a submitted set ends with names its own runs root, reports directory and scale,
    so the command it gives builds the report from another folder once the jobs have ended."""
    args = reproduce_tiny_args("adacomm", tmp_path)
    submitted = repro_cli(*args, "cluster=submitit_local", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    root, reports = tmp_path / "runs", tmp_path / "reports"
    command = f"repro report adacomm --runs {root} --scale tiny --out {reports}"
    assert submitted.stdout.rstrip().endswith(f"then `{command}` builds the report")
    watched = repro_cli("jobs", "--root", str(root), "--watch", "--interval", "1", timeout=500)
    assert watched.stdout.rstrip().endswith("5 jobs: 5 COMPLETED"), watched.stdout[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    built = repro_cli(*command.split()[1:], cwd=elsewhere)
    assert built.returncode == 0, built.stderr
    assert (reports / "adacomm" / "tiny" / "report.html").is_file()
    assert list(elsewhere.iterdir()) == []
